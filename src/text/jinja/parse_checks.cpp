#include "text/jinja/parse_checks.h"

#include <algorithm>
#include <set>
#include <string>

#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

using namespace ast;
using NameSet = std::set<std::string, std::less<>>;

void collect_names(const Expr* e, NameSet& names);
void collect_names(const Body& body, NameSet& names);

void collect_args(const Arguments& args, NameSet& names) {
  for (const auto& a : args.positional) collect_names(a.get(), names);
  for (const auto& [key, a] : args.keyword) collect_names(a.get(), names);
  collect_names(args.star.get(), names);
  collect_names(args.double_star.get(), names);
}

void collect_names(const Expr* e, NameSet& names) {
  if (!e) return;
  switch (e->kind) {
    case ExprKind::Name: names.insert(static_cast<const NameExpr*>(e)->name); return;
    case ExprKind::List:
    case ExprKind::Tuple:
      for (const auto& item : static_cast<const SequenceExpr*>(e)->items) collect_names(item.get(), names);
      return;
    case ExprKind::Dict:
      for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
        collect_names(k.get(), names);
        collect_names(v.get(), names);
      }
      return;
    case ExprKind::GetAttr: collect_names(static_cast<const GetAttrExpr*>(e)->object.get(), names); return;
    case ExprKind::GetItem: {
      const auto* g = static_cast<const GetItemExpr*>(e);
      collect_names(g->object.get(), names);
      collect_names(g->index.get(), names);
      return;
    }
    case ExprKind::Slice: {
      const auto* s = static_cast<const SliceExpr*>(e);
      collect_names(s->start.get(), names);
      collect_names(s->stop.get(), names);
      collect_names(s->step.get(), names);
      return;
    }
    case ExprKind::Call: {
      const auto* c = static_cast<const CallExpr*>(e);
      collect_names(c->callee.get(), names);
      collect_args(c->args, names);
      return;
    }
    case ExprKind::Filter: {
      const auto* f = static_cast<const FilterExpr*>(e);
      collect_names(f->input.get(), names);
      collect_args(f->args, names);
      return;
    }
    case ExprKind::Test: {
      const auto* t = static_cast<const TestExpr*>(e);
      collect_names(t->input.get(), names);
      collect_args(t->args, names);
      return;
    }
    case ExprKind::Neg:
    case ExprKind::Pos:
    case ExprKind::Not: collect_names(static_cast<const UnaryExpr*>(e)->operand.get(), names); return;
    case ExprKind::Binary: {
      const auto* b = static_cast<const BinaryExpr*>(e);
      collect_names(b->left.get(), names);
      collect_names(b->right.get(), names);
      return;
    }
    case ExprKind::And:
    case ExprKind::Or: {
      const auto* l = static_cast<const LogicalExpr*>(e);
      collect_names(l->left.get(), names);
      collect_names(l->right.get(), names);
      return;
    }
    case ExprKind::Concat:
      for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) collect_names(p.get(), names);
      return;
    case ExprKind::Compare: {
      const auto* c = static_cast<const CompareExpr*>(e);
      collect_names(c->first.get(), names);
      for (const auto& [op, operand] : c->rest) collect_names(operand.get(), names);
      return;
    }
    case ExprKind::CondExpr: {
      const auto* c = static_cast<const CondExpr*>(e);
      collect_names(c->test.get(), names);
      collect_names(c->then.get(), names);
      collect_names(c->otherwise.get(), names);
      return;
    }
    case ExprKind::Const:
    case ExprKind::NsRef: return;
  }
}

void collect_names(const Body& body, NameSet& names) {
  for (const auto& stmt : body) {
    switch (stmt->kind) {
      case StmtKind::Output: collect_names(static_cast<const OutputStmt&>(*stmt).expr.get(), names); break;
      case StmtKind::If: {
        const auto& s = static_cast<const IfStmt&>(*stmt);
        for (const auto& [test, branch] : s.branches) {
          collect_names(test.get(), names);
          collect_names(branch, names);
        }
        collect_names(s.otherwise, names);
        break;
      }
      case StmtKind::For: {
        const auto& s = static_cast<const ForStmt&>(*stmt);
        collect_names(s.iter.get(), names);
        collect_names(s.filter.get(), names);
        collect_names(s.body, names);
        collect_names(s.otherwise, names);
        break;
      }
      case StmtKind::Set: {
        const auto& s = static_cast<const SetStmt&>(*stmt);
        collect_names(s.value.get(), names);
        if (s.target->kind == ExprKind::NsRef) names.insert(static_cast<const NsRefExpr&>(*s.target).name);
        break;
      }
      case StmtKind::SetBlock: {
        const auto& s = static_cast<const SetBlockStmt&>(*stmt);
        collect_names(s.filter.get(), names);
        collect_names(s.body, names);
        break;
      }
      case StmtKind::Macro: {
        const auto& s = static_cast<const MacroStmt&>(*stmt);
        for (const auto& d : s.def.defaults) collect_names(d.get(), names);
        collect_names(s.def.body, names);
        break;
      }
      case StmtKind::CallBlock: {
        const auto& s = static_cast<const CallBlockStmt&>(*stmt);
        collect_names(s.call.get(), names);
        for (const auto& d : s.caller.defaults) collect_names(d.get(), names);
        collect_names(s.caller.body, names);
        break;
      }
      case StmtKind::FilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(*stmt);
        collect_names(s.filter.get(), names);
        collect_names(s.body, names);
        break;
      }
      case StmtKind::With: {
        const auto& s = static_cast<const WithStmt&>(*stmt);
        for (const auto& v : s.values) collect_names(v.get(), names);
        collect_names(s.body, names);
        break;
      }
      case StmtKind::Generation: collect_names(static_cast<const GenerationStmt&>(*stmt).body, names); break;
      case StmtKind::Text:
      case StmtKind::Break:
      case StmtKind::Continue: break;
    }
  }
}

// jinja2 rejects unknown filters and tests when compiling, except inside if-branches
// and conditional expressions ("soft" frames), where they fail only if evaluated.
// Loops, macros and blocks start fresh frames, which are not soft.
class NameChecker {
 public:
  void check(const Body& body, bool soft) {
    for (const auto& stmt : body) check(*stmt, soft);
  }

 private:
  void check(const Stmt& stmt, bool soft) {
    switch (stmt.kind) {
      case StmtKind::Output: check(static_cast<const OutputStmt&>(stmt).expr.get(), soft); break;
      case StmtKind::If: {
        const auto& s = static_cast<const IfStmt&>(stmt);
        for (const auto& [test, branch] : s.branches) {
          check(test.get(), true);
          check(branch, true);
        }
        check(s.otherwise, true);
        break;
      }
      case StmtKind::For: {
        const auto& s = static_cast<const ForStmt&>(stmt);
        check(s.iter.get(), soft);
        check(s.filter.get(), false);
        check(s.body, false);
        check(s.otherwise, false);
        break;
      }
      case StmtKind::Set: check(static_cast<const SetStmt&>(stmt).value.get(), soft); break;
      case StmtKind::SetBlock: {
        const auto& s = static_cast<const SetBlockStmt&>(stmt);
        check(s.filter.get(), false);
        check(s.body, false);
        break;
      }
      case StmtKind::Macro: check(static_cast<const MacroStmt&>(stmt).def); break;
      case StmtKind::CallBlock: {
        const auto& s = static_cast<const CallBlockStmt&>(stmt);
        check(s.call.get(), soft);
        check(s.caller);
        break;
      }
      case StmtKind::FilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(stmt);
        check(s.filter.get(), false);
        check(s.body, false);
        break;
      }
      case StmtKind::With: {
        const auto& s = static_cast<const WithStmt&>(stmt);
        for (const auto& v : s.values) check(v.get(), soft);
        check(s.body, false);
        break;
      }
      case StmtKind::Generation: check(static_cast<const GenerationStmt&>(stmt).body, false); break;
      case StmtKind::Text:
      case StmtKind::Break:
      case StmtKind::Continue: break;
    }
  }

  void check(const MacroDef& def) {
    for (const auto& d : def.defaults) check(d.get(), false);
    check(def.body, false);
  }

  void check(const Arguments& args, bool soft) {
    for (const auto& a : args.positional) check(a.get(), soft);
    for (const auto& [key, a] : args.keyword) check(a.get(), soft);
    check(args.star.get(), soft);
    check(args.double_star.get(), soft);
  }

  void check(const Expr* e, bool soft) {
    if (!e) return;
    switch (e->kind) {
      case ExprKind::Filter: {
        const auto* f = static_cast<const FilterExpr*>(e);
        if (!soft && !has_filter(f->name)) throw Error(located(f->line, f->column, str_cat("no filter named '", f->name, "'")));
        check(f->input.get(), soft);
        check(f->args, soft);
        return;
      }
      case ExprKind::Test: {
        const auto* t = static_cast<const TestExpr*>(e);
        if (!soft && !has_test(t->name)) throw Error(located(t->line, t->column, str_cat("no test named '", t->name, "'")));
        check(t->input.get(), soft);
        check(t->args, soft);
        return;
      }
      case ExprKind::CondExpr: {
        const auto* c = static_cast<const CondExpr*>(e);
        check(c->test.get(), true);
        check(c->then.get(), true);
        check(c->otherwise.get(), true);
        return;
      }
      case ExprKind::List:
      case ExprKind::Tuple:
        for (const auto& item : static_cast<const SequenceExpr*>(e)->items) check(item.get(), soft);
        return;
      case ExprKind::Dict:
        for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
          check(k.get(), soft);
          check(v.get(), soft);
        }
        return;
      case ExprKind::GetAttr: check(static_cast<const GetAttrExpr*>(e)->object.get(), soft); return;
      case ExprKind::GetItem: {
        const auto* g = static_cast<const GetItemExpr*>(e);
        check(g->object.get(), soft);
        check(g->index.get(), soft);
        return;
      }
      case ExprKind::Slice: {
        const auto* s = static_cast<const SliceExpr*>(e);
        check(s->start.get(), soft);
        check(s->stop.get(), soft);
        check(s->step.get(), soft);
        return;
      }
      case ExprKind::Call: {
        const auto* c = static_cast<const CallExpr*>(e);
        check(c->callee.get(), soft);
        check(c->args, soft);
        return;
      }
      case ExprKind::Neg:
      case ExprKind::Pos:
      case ExprKind::Not: check(static_cast<const UnaryExpr*>(e)->operand.get(), soft); return;
      case ExprKind::Binary: {
        const auto* b = static_cast<const BinaryExpr*>(e);
        check(b->left.get(), soft);
        check(b->right.get(), soft);
        return;
      }
      case ExprKind::And:
      case ExprKind::Or: {
        const auto* l = static_cast<const LogicalExpr*>(e);
        check(l->left.get(), soft);
        check(l->right.get(), soft);
        return;
      }
      case ExprKind::Concat:
        for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) check(p.get(), soft);
        return;
      case ExprKind::Compare: {
        const auto* c = static_cast<const CompareExpr*>(e);
        check(c->first.get(), soft);
        for (const auto& [op, operand] : c->rest) check(operand.get(), soft);
        return;
      }
      case ExprKind::Const:
      case ExprKind::Name:
      case ExprKind::NsRef: return;
    }
  }
};

}  // namespace

void analyze_macro(MacroDef& def) {
  NameSet names;
  collect_names(def.body, names);
  const bool caller_is_param = std::find(def.params.begin(), def.params.end(), "caller") != def.params.end();
  def.catch_varargs = names.count("varargs") > 0;
  def.catch_kwargs = names.count("kwargs") > 0;
  def.uses_caller = names.count("caller") > 0 && !caller_is_param;
}

void check_filter_and_test_names(const Body& body) { NameChecker().check(body, false); }

}  // namespace ernie::jinja
