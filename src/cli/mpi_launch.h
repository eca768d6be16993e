// `--tensor-parallel-size N` from a plain shell: the command starts its own N ranks by
// running itself again under `mpirun` (Open MPI), so FastDeploy's seed command works as
// written. Under an MPI launcher already (mpirun by hand, a hostfile, several nodes),
// nothing happens and each rank goes on.
#pragma once

namespace ernie {

// When the command line asks for N > 1 ranks and no MPI launcher started this process,
// runs `mpirun -np N ... <the same command line>`, passes SIGINT/SIGTERM to rank 0 (the
// graceful shutdown) and exits with mpirun's status; returns otherwise.
void relaunch_under_mpirun_if_needed(int argc, char** argv);

}  // namespace ernie
