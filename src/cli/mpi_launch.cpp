#include "cli/mpi_launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dist/mpi_communicator.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

// The value of `--name V` or `--name=V`, or empty.
std::string flag_value(int argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == flag && i + 1 < argc) return argv[i + 1];
    if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
  }
  return "";
}

// NUMA nodes of this machine (sysfs), 1 when it cannot tell.
int numa_nodes() {
  int nodes = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/node", error)) {
    const std::string name = entry.path().filename();
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(static_cast<unsigned char>(name[4]))) ++nodes;
  }
  return nodes > 0 ? nodes : 1;
}

// The process of rank 0 among mpirun's children on this machine (Open MPI sets
// OMPI_COMM_WORLD_RANK in each), or -1.
pid_t rank_zero(pid_t mpirun) {
  std::ifstream children("/proc/" + std::to_string(mpirun) + "/task/" + std::to_string(mpirun) + "/children");
  for (pid_t child; children >> child;) {
    std::ifstream environ("/proc/" + std::to_string(child) + "/environ");
    for (std::string entry; std::getline(environ, entry, '\0');)
      if (entry == "OMPI_COMM_WORLD_RANK=0") return child;
  }
  return -1;
}

// Runs `command` (mpirun) and waits for it. SIGINT and SIGTERM go to rank 0 alone, which
// shuts the server down gracefully and then stops the other ranks; mpirun, which would
// signal every rank at once and report the job as aborted, never sees them. Returns the
// exit status to leave with.
int supervise(std::vector<std::string>& command) {
  sigset_t shutdown;
  sigemptyset(&shutdown);
  sigaddset(&shutdown, SIGINT);
  sigaddset(&shutdown, SIGTERM);
  sigaddset(&shutdown, SIGCHLD);
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &shutdown, &previous);
  const pid_t child = fork();
  if (child < 0) fail("cannot start mpirun: ", std::strerror(errno));
  if (child == 0) {
    setpgid(0, 0);  // a terminal's Ctrl-C reaches this supervisor, not mpirun and its ranks
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    std::vector<char*> args;
    for (std::string& part : command) args.push_back(part.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "error: cannot run mpirun (%s): tensor parallelism needs Open MPI (Debian: openmpi-bin)\n",
                 std::strerror(errno));
    std::_Exit(127);
  }
  for (;;) {
    int signal_number = 0;
    sigwait(&shutdown, &signal_number);
    if (signal_number == SIGCHLD) {
      int status = 0;
      if (waitpid(child, &status, WNOHANG) != child) continue;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    const pid_t target = rank_zero(child);
    kill(target > 0 ? target : child, signal_number);
  }
}

}  // namespace

void relaunch_under_mpirun_if_needed(int argc, char** argv) {
  const std::string ranks = flag_value(argc, argv, "tensor-parallel-size");
  if (ranks.empty() || std::atoi(ranks.c_str()) <= 1 || launched_by_mpi()) return;
  std::vector<std::string> command = {"mpirun", "-np", ranks};
  // Open MPI refuses to run as root unless told (containers and CI machines often are).
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  // More ranks than cores is allowed (slower, but it runs: tests and small machines).
  command.push_back("--oversubscribe");
  // Each rank on its own NUMA node where there are several (its shard's memory is local
  // to the cores that stream it), else unbound.
  const int nodes = numa_nodes();
  command.insert(command.end(), {"--bind-to", nodes > 1 ? "numa" : "none", "--map-by", nodes > 1 ? "numa" : "slot"});
  // Several machines: FastDeploy's --ips list, the first the master (rank 0 runs there).
  if (const std::string ips = flag_value(argc, argv, "ips"); !ips.empty()) {
    std::vector<std::string> hosts;
    for (size_t start = 0; start <= ips.size();) {
      const size_t comma = std::min(ips.find(',', start), ips.size());
      if (comma > start) hosts.push_back(ips.substr(start, comma - start));
      start = comma + 1;
    }
    const int per_host = (std::atoi(ranks.c_str()) + static_cast<int>(hosts.size()) - 1) / static_cast<int>(hosts.size());
    std::string slots;
    for (const std::string& host : hosts) slots += (slots.empty() ? "" : ",") + host + ":" + std::to_string(per_host);
    command.insert(command.end(), {"-H", slots});
  }
  command.push_back(std::filesystem::canonical("/proc/self/exe").string());
  for (int i = 1; i < argc; ++i) command.push_back(argv[i]);
  std::string shown;
  for (const std::string& part : command) shown += (shown.empty() ? "" : " ") + part;
  log_info("--tensor-parallel-size ", ranks, ": starting the ranks with ", shown);
  std::exit(supervise(command));
}

}  // namespace ernie
