#include "text/jinja/parser.h"

#include <algorithm>
#include <set>
#include <utility>

#include "text/jinja/lexer.h"
#include "text/jinja/parse_checks.h"
#include "util/error.h"

namespace ernie::jinja {
namespace {

using namespace ast;

// Deeper nesting than this (brackets, prefix operators, blocks) is refused rather
// than risking the C++ stack; real templates nest a handful of levels, and jinja2
// itself cannot compile much more (Python limits indentation to 100 levels).
constexpr int kMaxNesting = 100;

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::Data: return "template text";
    case TokenType::VariableBegin: return "'{{'";
    case TokenType::VariableEnd: return "'}}'";
    case TokenType::BlockBegin: return "'{%'";
    case TokenType::BlockEnd: return "'%}'";
    case TokenType::Name: return "'" + t.text + "'";
    case TokenType::String: return "a string";
    case TokenType::Integer: return "an integer";
    case TokenType::Float: return "a float";
    case TokenType::Operator: return "'" + t.text + "'";
    case TokenType::Eof: return "the end of the template";
  }
  return "a token";
}

std::string quote_tags(const std::vector<std::string_view>& tags) {
  std::string out;
  for (size_t i = 0; i < tags.size(); ++i) {
    if (i > 0) out += i + 1 == tags.size() ? " or " : ", ";
    out += str_cat("{% ", tags[i], " %}");
  }
  return out;
}

template <typename T>
std::unique_ptr<T> at(std::unique_ptr<T> node, const Token& t) {
  node->line = t.line;
  node->column = t.column;
  return node;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() { return subparse({}); }

 private:
  struct OpenTag {
    std::string name;
    int line;
    int column;
  };

  // Counts nesting on entry and exit of recursive productions.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) {
        p_.error(p_.cur(), str_cat("the template nests more than ", kMaxNesting, " levels deep"));
      }
    }
    ~DepthGuard() { --p_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser& p_;
  };

  // A left-associative chain (a + b + c, x.y[0].z, s|f|g) is parsed in a loop, yet
  // each link nests the tree one node deeper, and evaluating or destroying the tree
  // recurses that deep. So each link counts as a level of nesting until the chain ends.
  class ChainGuard {
   public:
    explicit ChainGuard(Parser& p) : p_(p) {}
    ~ChainGuard() { p_.depth_ -= links_; }
    ChainGuard(const ChainGuard&) = delete;
    ChainGuard& operator=(const ChainGuard&) = delete;

    void link() {
      ++links_;
      if (++p_.depth_ > kMaxNesting) {
        p_.error(p_.cur(), str_cat("the template nests more than ", kMaxNesting,
                                   " levels deep (each link of a chain such as a + b + c counts)"));
      }
    }

   private:
    Parser& p_;
    int links_ = 0;
  };

  // --- token stream -------------------------------------------------------------------

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::Name && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void error(const Token& t, std::string_view message) const {
    throw Error(located(t.line, t.column, message));
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) error(cur(), str_cat("expected '", op, "', got ", describe(cur())));
  }
  const Token& expect_name() {
    if (cur().type != TokenType::Name) error(cur(), str_cat("expected a name, got ", describe(cur())));
    return next();
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) error(cur(), str_cat("expected '", name, "', got ", describe(cur())));
  }
  void expect(TokenType type, std::string_view what) {
    if (cur().type != type) error(cur(), str_cat("expected ", what, ", got ", describe(cur())));
    next();
  }

  // --- statements ---------------------------------------------------------------------

  // Parses until a block whose tag is in `end_tags` (left as the current token) or the
  // end of the template.
  Body subparse(const std::vector<std::string_view>& end_tags) {
    DepthGuard guard(*this);
    Body body;
    while (cur().type != TokenType::Eof) {
      const Token& t = cur();
      if (t.type == TokenType::Data) {
        auto text = at(std::make_unique<TextStmt>(), t);
        text->text = t.text;
        next();
        body.push_back(std::move(text));
      } else if (t.type == TokenType::VariableBegin) {
        auto out = at(std::make_unique<OutputStmt>(), next());
        out->expr = parse_tuple(false, true, false);
        expect(TokenType::VariableEnd, "'}}'");
        body.push_back(std::move(out));
      } else if (t.type == TokenType::BlockBegin) {
        next();
        if (cur().type == TokenType::Name &&
            std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end()) {
          return body;
        }
        body.push_back(parse_statement(end_tags));
        expect(TokenType::BlockEnd, "'%}' to end the tag");
      } else {
        error(t, str_cat("unexpected ", describe(t)));
      }
    }
    return body;
  }

  // `:`? then `%}`, a body up to one of `end_tags`, and optionally that end tag.
  Body parse_statements(const std::vector<std::string_view>& end_tags, bool drop_needle) {
    skip_op(":");
    expect(TokenType::BlockEnd, "'%}' to end the tag");
    Body body = subparse(end_tags);
    if (cur().type == TokenType::Eof) {
      const OpenTag& open = tags_.back();
      error(cur(), str_cat("unexpected end of template: expected ", quote_tags(end_tags), " to close the '",
                           open.name, "' tag at line ", open.line, ", column ", open.column));
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement(const std::vector<std::string_view>& enclosing_end_tags) {
    const Token& t = cur();
    if (t.type != TokenType::Name) error(t, str_cat("expected a tag name, got ", describe(t)));
    const std::string name = t.text;
    static const std::set<std::string, std::less<>> kUnsupported = {"block",  "extends", "include",
                                                                       "import", "from",    "autoescape"};
    if (kUnsupported.count(name)) {
      error(t, str_cat("the '", name,
                       "' tag is not supported: chat templates are single templates rendered without a loader"));
    }
    tags_.push_back({name, t.line, t.column});
    StmtPtr stmt;
    if (name == "for") {
      stmt = parse_for();
    } else if (name == "if") {
      stmt = parse_if();
    } else if (name == "set") {
      stmt = parse_set();
    } else if (name == "macro") {
      stmt = parse_macro();
    } else if (name == "call") {
      stmt = parse_call_block();
    } else if (name == "filter") {
      stmt = parse_filter_block();
    } else if (name == "with") {
      stmt = parse_with();
    } else if (name == "print") {
      stmt = parse_print();
    } else if (name == "generation") {
      auto gen = at(std::make_unique<GenerationStmt>(), next());
      gen->body = parse_statements({"endgeneration"}, true);
      stmt = std::move(gen);
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error(t, str_cat("'", name, "' outside of a for loop"));
      stmt = at(std::make_unique<LoopControlStmt>(name == "break" ? StmtKind::Break : StmtKind::Continue), next());
    } else {
      tags_.pop_back();
      std::string message = str_cat("unknown tag '", name, "'");
      if (!enclosing_end_tags.empty()) {
        const OpenTag& open = tags_.back();
        message += str_cat("; expected ", quote_tags(enclosing_end_tags), " to close the '", open.name,
                           "' tag at line ", open.line, ", column ", open.column);
      }
      error(t, message);
    }
    tags_.pop_back();
    return stmt;
  }

  StmtPtr parse_for() {
    auto s = at(std::make_unique<ForStmt>(), next());
    s->target = parse_assign_target(false);
    expect_name("in");
    s->iter = parse_tuple(false, false, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") s->otherwise = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = at(std::make_unique<IfStmt>(), next());
    while (true) {
      ExprPtr test = parse_tuple(false, false, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& end = next();
      if (end.text == "elif") continue;
      if (end.text == "else") s->otherwise = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    const Token& t = next();
    ExprPtr target = parse_assign_target(true);
    if (skip_op("=")) {
      auto s = at(std::make_unique<SetStmt>(), t);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, false);
      return s;
    }
    auto s = at(std::make_unique<SetBlockStmt>(), t);
    s->target = std::move(target);
    s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(MacroDef& def) {
    expect_op("(");
    while (!is_op(")")) {
      if (!def.params.empty()) expect_op(",");
      def.params.push_back(expect_name().text);
      if (skip_op("=")) {
        def.defaults.push_back(parse_expression(true));
      } else if (!def.defaults.empty()) {
        error(cur(), "non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  // A macro body is a function of its own: loop controls do not reach through it.
  Body parse_function_body(std::string_view end_tag) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    Body body = parse_statements({end_tag}, true);
    loop_depth_ = saved;
    return body;
  }

  StmtPtr parse_macro() {
    auto s = at(std::make_unique<MacroStmt>(), next());
    s->def.name = expect_name().text;
    parse_signature(s->def);
    s->def.body = parse_function_body("endmacro");
    analyze_macro(s->def);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = at(std::make_unique<CallBlockStmt>(), next());
    s->caller.name = "caller";
    if (is_op("(")) parse_signature(s->caller);
    const Token& call_token = cur();
    s->call = parse_expression(true);
    if (s->call->kind != ExprKind::Call) error(call_token, "expected a macro call after 'call'");
    s->caller.body = parse_function_body("endcall");
    analyze_macro(s->caller);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = at(std::make_unique<FilterBlockStmt>(), next());
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = at(std::make_unique<WithStmt>(), next());
    while (cur().type != TokenType::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(false));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  StmtPtr parse_print() {
    auto s = at(std::make_unique<OutputStmt>(), next());
    auto concat = at(std::make_unique<ConcatExpr>(), cur());
    while (cur().type != TokenType::BlockEnd) {
      if (!concat->parts.empty()) expect_op(",");
      concat->parts.push_back(parse_expression(true));
    }
    s->expr = std::move(concat);
    return s;
  }

  static bool can_assign(const Expr& e) {
    if (e.kind == ExprKind::Name || e.kind == ExprKind::NsRef) return true;
    if (e.kind == ExprKind::Tuple) {
      const auto& seq = static_cast<const SequenceExpr&>(e);
      return std::all_of(seq.items.begin(), seq.items.end(), [](const ExprPtr& item) { return can_assign(*item); });
    }
    return false;
  }

  // A name, a tuple of targets ("a, (b, c)"), or with `with_namespace` ns.attr.
  ExprPtr parse_assign_target(bool with_namespace) {
    const Token& start = cur();
    ExprPtr target;
    if (with_namespace && peek().type == TokenType::Operator && peek().text == ".") {
      auto ref = at(std::make_unique<NsRefExpr>(), start);
      ref->name = expect_name().text;
      next();  // the dot
      ref->attr = expect_name().text;
      target = std::move(ref);
    } else {
      target = parse_tuple(true, true, false);
    }
    if (!can_assign(*target)) error(start, "can't assign to this expression: expected a name or a tuple of names");
    return target;
  }

  // --- expressions --------------------------------------------------------------------

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Token& start = cur();
    ExprPtr expr = parse_or();
    ChainGuard chain(*this);
    while (skip_name("if")) {
      chain.link();
      auto cond = at(std::make_unique<CondExpr>(), start);
      cond->test = parse_or();
      if (skip_name("else")) cond->otherwise = parse_condexpr();
      cond->then = std::move(expr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr parse_or() {
    const Token& start = cur();
    ExprPtr left = parse_and();
    ChainGuard chain(*this);
    while (skip_name("or")) {
      chain.link();
      auto node = at(std::make_unique<LogicalExpr>(ExprKind::Or), start);
      node->left = std::move(left);
      node->right = parse_and();
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_and() {
    const Token& start = cur();
    ExprPtr left = parse_not();
    ChainGuard chain(*this);
    while (skip_name("and")) {
      chain.link();
      auto node = at(std::make_unique<LogicalExpr>(ExprKind::And), start);
      node->left = std::move(left);
      node->right = parse_not();
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto node = at(std::make_unique<UnaryExpr>(ExprKind::Not), next());
      node->operand = parse_not();
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& start = cur();
    ExprPtr first = parse_math1();
    std::vector<std::pair<CompareOp, ExprPtr>> rest;
    while (true) {
      CompareOp op;
      if (cur().type == TokenType::Operator && compare_op(cur().text, op)) {
        next();
      } else if (skip_name("in")) {
        op = CompareOp::In;
      } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        next();
        next();
        op = CompareOp::NotIn;
      } else {
        break;
      }
      rest.emplace_back(op, parse_math1());
    }
    if (rest.empty()) return first;
    auto node = at(std::make_unique<CompareExpr>(), start);
    node->first = std::move(first);
    node->rest = std::move(rest);
    return node;
  }

  static bool compare_op(const std::string& s, CompareOp& op) {
    if (s == "==") op = CompareOp::Eq;
    else if (s == "!=") op = CompareOp::Ne;
    else if (s == "<") op = CompareOp::Lt;
    else if (s == "<=") op = CompareOp::Le;
    else if (s == ">") op = CompareOp::Gt;
    else if (s == ">=") op = CompareOp::Ge;
    else return false;
    return true;
  }

  ExprPtr binary(const Token& start, BinaryOp op, ExprPtr left, ExprPtr right) {
    auto node = at(std::make_unique<BinaryExpr>(), start);
    node->op = op;
    node->left = std::move(left);
    node->right = std::move(right);
    return node;
  }

  ExprPtr parse_math1() {
    const Token& start = cur();
    ExprPtr left = parse_concat();
    ChainGuard chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.link();
      const BinaryOp op = next().text == "+" ? BinaryOp::Add : BinaryOp::Sub;
      left = binary(start, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& start = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto node = at(std::make_unique<ConcatExpr>(), start);
    node->parts.push_back(std::move(first));
    while (skip_op("~")) node->parts.push_back(parse_math2());
    return node;
  }

  ExprPtr parse_math2() {
    const Token& start = cur();
    ExprPtr left = parse_pow();
    ChainGuard chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      const std::string op = next().text;
      const BinaryOp kind = op == "*" ? BinaryOp::Mul : op == "/" ? BinaryOp::Div : op == "//" ? BinaryOp::FloorDiv : BinaryOp::Mod;
      left = binary(start, kind, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    const Token& start = cur();
    ExprPtr left = parse_unary(true);
    ChainGuard chain(*this);
    while (skip_op("**")) {
      chain.link();
      left = binary(start, BinaryOp::Pow, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      DepthGuard guard(*this);
      const Token& t = next();
      auto unary = at(std::make_unique<UnaryExpr>(t.text == "-" ? ExprKind::Neg : ExprKind::Pos), t);
      unary->operand = parse_unary(false);
      node = std::move(unary);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == TokenType::Name) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto c = at(std::make_unique<ConstExpr>(), t);
        c->value = Value(t.text == "true" || t.text == "True");
        return c;
      }
      if (t.text == "none" || t.text == "None") {
        auto c = at(std::make_unique<ConstExpr>(), t);
        c->value = Value(nullptr);
        return c;
      }
      auto name = at(std::make_unique<NameExpr>(), t);
      name->name = t.text;
      return name;
    }
    if (t.type == TokenType::String) {
      auto c = at(std::make_unique<ConstExpr>(), t);
      std::string text = next().text;
      while (cur().type == TokenType::String) text += next().text;  // "a" "b" concatenates
      c->value = Value(std::move(text));
      return c;
    }
    if (t.type == TokenType::Integer || t.type == TokenType::Float) {
      auto c = at(std::make_unique<ConstExpr>(), t);
      c->value = t.type == TokenType::Integer ? Value(t.int_value) : Value(t.float_value);
      next();
      return c;
    }
    if (is_op("(")) {
      next();
      ExprPtr inner = parse_tuple(false, true, true);
      expect_op(")");
      return inner;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    error(t, str_cat("unexpected ", describe(t)));
  }

  // jinja2 3.1 also passes "extra end rules" (`in` after a for target) to this check,
  // but never matches them (Token.test_any receives the rule tuple as one argument),
  // so `{% for a, in xs %}` is a syntax error there; there are no such rules here.
  bool is_tuple_end() const {
    const Token& t = cur();
    return t.type == TokenType::VariableEnd || t.type == TokenType::BlockEnd || is_op(")");
  }

  // Expressions separated by commas make a tuple ("a, b"); one expression alone is
  // itself. `simplified` parses only primaries (assignment targets).
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, bool explicit_parentheses) {
    const Token& start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end()) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) error(cur(), str_cat("expected an expression, got ", describe(cur())));
    }
    auto tuple = at(std::make_unique<SequenceExpr>(ExprKind::Tuple), start);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_list() {
    auto list = at(std::make_unique<SequenceExpr>(ExprKind::List), next());
    while (!is_op("]")) {
      if (!list->items.empty()) expect_op(",");
      if (is_op("]")) break;
      list->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = at(std::make_unique<DictExpr>(), next());
    while (!is_op("}")) {
      if (!dict->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      dict->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainGuard chain(*this);
    while (is_op(".") || is_op("[") || is_op("(")) {
      chain.link();
      node = is_op("(") ? parse_call(std::move(node)) : parse_subscript(std::move(node));
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      if (is_op("|") || is_name("is") || is_op("(")) chain.link();
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.type == TokenType::Name) {
        auto get = at_start_of(std::make_unique<GetAttrExpr>(), *node);
        get->object = std::move(node);
        get->name = attr.text;
        return get;
      }
      if (attr.type != TokenType::Integer) error(attr, "expected a name or a number after '.'");
      auto index = at(std::make_unique<ConstExpr>(), attr);
      index->value = Value(attr.int_value);
      auto get = at_start_of(std::make_unique<GetItemExpr>(), *node);
      get->object = std::move(node);
      get->index = std::move(index);
      return get;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto get = at_start_of(std::make_unique<GetItemExpr>(), *node);
    get->object = std::move(node);
    if (args.size() == 1) {
      get->index = std::move(args[0]);
    } else {
      auto tuple = at(std::make_unique<SequenceExpr>(ExprKind::Tuple), t);
      tuple->items = std::move(args);
      get->index = std::move(tuple);
    }
    return get;
  }

  ExprPtr parse_subscribed() {
    const Token& start = cur();
    ExprPtr first;
    if (is_op(":")) {
      next();
    } else {
      first = parse_expression(true);
      if (!is_op(":")) return first;
      next();
    }
    auto slice = at(std::make_unique<SliceExpr>(), start);
    slice->start = std::move(first);
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
    return slice;
  }

  Arguments parse_call_args() {
    const Token& open = cur();
    expect_op("(");
    Arguments args;
    auto ensure = [&](bool ok) {
      if (!ok) error(open, "invalid syntax for function call expression");
    };
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!args.star && !args.double_star);
        next();
        args.star = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!args.double_star);
        next();
        args.double_star = parse_expression(true);
      } else if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        ensure(!args.double_star);
        std::string key = next().text;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!args.star && !args.double_star && args.keyword.empty());
        args.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return args;
  }

  // Calls and subscripts report the position where their whole expression starts.
  template <typename T>
  static std::unique_ptr<T> at_start_of(std::unique_ptr<T> node, const Expr& start) {
    node->line = start.line;
    node->column = start.column;
    return node;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = at_start_of(std::make_unique<CallExpr>(), *callee);
    call->args = parse_call_args();
    call->callee = std::move(callee);
    return call;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(".")) name += "." + expect_name().text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    ChainGuard chain(*this);
    while (is_op("|") || start_inline) {
      chain.link();
      if (!start_inline) next();
      start_inline = false;
      auto filter = at(std::make_unique<FilterExpr>(), cur());
      filter->name = parse_dotted_name();
      if (is_op("(")) filter->args = parse_call_args();
      filter->input = std::move(node);
      node = std::move(filter);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Token& is = next();
    const bool negated = skip_name("not");
    auto test = at(std::make_unique<TestExpr>(), is);
    test->name = parse_dotted_name();
    const Token& t = cur();
    if (is_op("(")) {
      test->args = parse_call_args();
    } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Integer ||
                t.type == TokenType::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      // `x is divisibleby 3`: one argument without parentheses.
      if (is_name("is")) error(t, "you cannot chain multiple tests with 'is'");
      test->args.positional.push_back(parse_postfix(parse_primary()));
    }
    test->input = std::move(node);
    if (!negated) return test;
    auto negation = at(std::make_unique<UnaryExpr>(ExprKind::Not), is);
    negation->operand = std::move(test);
    return negation;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<OpenTag> tags_;
};

}  // namespace

ast::Body parse_template(std::string_view source) {
  Parser parser(tokenize(source));
  ast::Body body = parser.parse();
  check_filter_and_test_names(body);
  return body;
}

}  // namespace ernie::jinja
