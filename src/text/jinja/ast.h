// The parsed form of a template: expressions and statements as jinja2's parser builds
// them (same precedence, same node shapes), so evaluation can follow jinja2's
// semantics node by node. Every node knows where it came from for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace ernie::jinja::ast {

struct Node {
  int line = 0;
  int column = 0;
};

// --- expressions ----------------------------------------------------------------------

enum class ExprKind {
  Const, Name, List, Tuple, Dict, GetAttr, GetItem, Slice, Call, Filter, Test,
  Neg, Pos, Not, Binary, And, Or, Concat, Compare, CondExpr, NsRef,
};

struct Expr : Node {
  explicit Expr(ExprKind k) : kind(k) {}
  virtual ~Expr() = default;
  ExprKind kind;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr() : Expr(ExprKind::Const) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr() : Expr(ExprKind::Name) {}
  std::string name;
};

// List and Tuple literals (and tuple assignment targets).
struct SequenceExpr : Expr {
  explicit SequenceExpr(ExprKind k) : Expr(k) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  DictExpr() : Expr(ExprKind::Dict) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr() : Expr(ExprKind::GetAttr) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {
  GetItemExpr() : Expr(ExprKind::GetItem) {}
  ExprPtr object;
  ExprPtr index;  // a SliceExpr for x[a:b:c]
};

struct SliceExpr : Expr {
  SliceExpr() : Expr(ExprKind::Slice) {}
  ExprPtr start;  // each may be null
  ExprPtr stop;
  ExprPtr step;
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star;         // *args
  ExprPtr double_star;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr() : Expr(ExprKind::Call) {}
  ExprPtr callee;
  Arguments args;
};

// `input | name(args)`; input is null for the filter of a {% filter %} block or a
// block set, where the block's rendered text is the input.
struct FilterExpr : Expr {
  FilterExpr() : Expr(ExprKind::Filter) {}
  ExprPtr input;
  std::string name;
  Arguments args;
};

struct TestExpr : Expr {
  TestExpr() : Expr(ExprKind::Test) {}
  ExprPtr input;
  std::string name;
  Arguments args;
};

// Neg, Pos, Not.
struct UnaryExpr : Expr {
  explicit UnaryExpr(ExprKind k) : Expr(k) {}
  ExprPtr operand;
};

enum class BinaryOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };

struct BinaryExpr : Expr {
  BinaryExpr() : Expr(ExprKind::Binary) {}
  BinaryOp op = BinaryOp::Add;
  ExprPtr left;
  ExprPtr right;
};

// And, Or: short-circuit, yielding one of the operands as Python does.
struct LogicalExpr : Expr {
  explicit LogicalExpr(ExprKind k) : Expr(k) {}
  ExprPtr left;
  ExprPtr right;
};

// a ~ b ~ c
struct ConcatExpr : Expr {
  ConcatExpr() : Expr(ExprKind::Concat) {}
  std::vector<ExprPtr> parts;
};

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

// a < b <= c chains as in Python.
struct CompareExpr : Expr {
  CompareExpr() : Expr(ExprKind::Compare) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

// `then if test else otherwise`; otherwise may be null (undefined when false).
struct CondExpr : Expr {
  CondExpr() : Expr(ExprKind::CondExpr) {}
  ExprPtr test;
  ExprPtr then;
  ExprPtr otherwise;
};

// The target of {% set ns.attr = ... %}.
struct NsRefExpr : Expr {
  NsRefExpr() : Expr(ExprKind::NsRef) {}
  std::string name;
  std::string attr;
};

// --- statements -----------------------------------------------------------------------

enum class StmtKind {
  Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Generation,
};

struct Stmt : Node {
  explicit Stmt(StmtKind k) : kind(k) {}
  virtual ~Stmt() = default;
  StmtKind kind;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt() : Stmt(StmtKind::Text) {}
  std::string text;
};

// {{ expr }} and {% print expr %}
struct OutputStmt : Stmt {
  OutputStmt() : Stmt(StmtKind::Output) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  IfStmt() : Stmt(StmtKind::If) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body otherwise;
};

struct ForStmt : Stmt {
  ForStmt() : Stmt(StmtKind::For) {}
  ExprPtr target;
  ExprPtr iter;
  ExprPtr filter;  // {% for x in xs if cond %}; may be null
  Body body;
  Body otherwise;  // {% else %}: runs when nothing was iterated
  bool recursive = false;
};

struct SetStmt : Stmt {
  SetStmt() : Stmt(StmtKind::Set) {}
  ExprPtr target;  // Name, Tuple of targets, or NsRef
  ExprPtr value;
};

// {% set x | filters %}body{% endset %}
struct SetBlockStmt : Stmt {
  SetBlockStmt() : Stmt(StmtKind::SetBlock) {}
  ExprPtr target;
  ExprPtr filter;  // a FilterExpr chain whose innermost input is null; may be null
  Body body;
};

// What a macro and the body of a call block share: a signature and a body.
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool catch_varargs = false;  // the body reads `varargs`
  bool catch_kwargs = false;   // the body reads `kwargs`
  bool uses_caller = false;    // the body reads `caller` (not a parameter)
};

struct MacroStmt : Stmt {
  MacroStmt() : Stmt(StmtKind::Macro) {}
  MacroDef def;
};

// {% call(params) macro(args) %}body{% endcall %}: the body becomes `caller`.
struct CallBlockStmt : Stmt {
  CallBlockStmt() : Stmt(StmtKind::CallBlock) {}
  MacroDef caller;
  ExprPtr call;  // a CallExpr
};

struct FilterBlockStmt : Stmt {
  FilterBlockStmt() : Stmt(StmtKind::FilterBlock) {}
  ExprPtr filter;  // FilterExpr chain with a null innermost input
  Body body;
};

struct WithStmt : Stmt {
  WithStmt() : Stmt(StmtKind::With) {}
  std::vector<ExprPtr> targets;
  std::vector<ExprPtr> values;
  Body body;
};

// {% generation %}...{% endgeneration %} (transformers' AssistantTracker): renders
// its body; the span tracking it exists for has no use at inference.
struct GenerationStmt : Stmt {
  GenerationStmt() : Stmt(StmtKind::Generation) {}
  Body body;
};

struct LoopControlStmt : Stmt {
  explicit LoopControlStmt(StmtKind k) : Stmt(k) {}
};

}  // namespace ernie::jinja::ast
