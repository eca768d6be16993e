// Unit tests of the Jinja engine, feature by feature. The expected strings of the
// table below are what jinja2 3.1.2 renders in transformers' chat-template environment
// (tests/text/jinja_render.py), so each case pins one behaviour to jinja2's.
#include "text/jinja/template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "util/error.h"

namespace ernie::jinja {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

ordered_json default_context() {
  return ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi there"},
                 {"role": "assistant", "content": "Hello!"}],
    "user": {"name": "Ada", "tags": ["x", "y"]},
    "n": 7, "pi": 3.14159, "flag": null})");
}

std::string render(std::string_view source, const ordered_json& context = default_context()) {
  return Template::parse(source).render(context);
}

// The message of the ernie::Error that rendering (or parsing) `source` throws.
std::string render_error(std::string_view source, const ordered_json& context = default_context(),
                         const Limits& limits = Limits{}) {
  try {
    Template::parse(source).render(context, limits);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error from: " << source;
  return "";
}

struct RenderCase {
  const char* name;
  const char* source;
  const char* expected;
};

const RenderCase kCases[] = {
    {"Whitespace_TrimBlocksDropsNewlineAfterBlockTag",
     "{% if true %}\nyes\n{% endif %}\nafter",
     "yes\nafter"},
    {"Whitespace_LstripBlocksDropsIndentBeforeBlockTag",
     "a\n    {% if true %}\n    b\n    {% endif %}\nc",
     "a\n    b\nc"},
    {"Whitespace_LstripDoesNotApplyToVariables",
     "a\n    {{ 'b' }}\nc",
     "a\n    b\nc"},
    {"Whitespace_MinusStripsAllWhitespace",
     "a  \n\n  {%- if true -%}  \n\n  b  {{- ' c ' -}}  d  {%- endif %}",
     "ab c d"},
    {"Whitespace_PlusDisablesLstripAndTrim",
     "a\n    {%+ if true +%}\nb{% endif %}",
     "a\n    \nb"},
    {"Whitespace_CommentsAreRemovedAndTrimmed",
     "a\n  {# note #}\nb {#- tight -#} c",
     "a\nbc"},
    {"Whitespace_OneTrailingNewlineIsDropped",
     "text\n\n",
     "text\n"},
    {"Whitespace_CrLfBecomesLf",
     "a\r\nb\rc",
     "a\nb\nc"},
    {"Whitespace_RawBlockKeepsTags",
     "{% raw %}{{ x }} {% if %}{% endraw %}",
     "{{ x }} {% if %}"},
    {"Literals_StringEscapes",
     "{{ 'a\\tb\\n\\x41\\u00e9 \\'q\\' \\\\ \\z' }}",
     "a\tb\nAé 'q' \\ \\z"},
    {"Literals_Numbers",
     "{{ 42 }} {{ 1_000 }} {{ 0x1f }} {{ 0b101 }} {{ 0o17 }} {{ 2.5 }} {{ 1e3 }} {{ 1.0 }}",
     "42 1000 31 5 15 2.5 1000.0 1.0"},
    {"Literals_Containers",
     "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ (1, 2) }} {{ () }}",
     "[1, 'a', None, True, 2.5] {'k': 'v', 'n': [1]} (1,) (1, 2) ()"},
    {"Literals_Constants",
     "{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}",
     "True True False False None None"},
    {"Literals_ReprQuoting",
     "{{ [\"it's\", 'say \"x\"', 'both \\' \"', 'tab\\t'] }}",
     "[\"it's\", 'say \"x\"', 'both \\' \"', 'tab\\t']"},
    {"Operators_Arithmetic",
     "{{ 3 / 2 }} {{ 4 // 2 }} {{ 4 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 "
     "** -1 }} {{ 1 + 2.0 }} {{ 0.1 + 0.2 }}",
     "1.5 2 2.0 -4 2 -2 1024 0.5 3.0 0.30000000000000004"},
    {"Operators_Precedence",
     "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ -3|abs }} {{ 'x' ~ 1 * 2 }}",
     "7 9 64 4 3 x2"},
    {"Operators_StringAndListOps",
     "{{ 'ab' + 'cd' }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ [0] * 3 }} {{ 'n=' ~ n ~ ';' }} {{ 'a' ~ non"
     "e ~ true }}",
     "abcd abab [1, 2] [0, 0, 0] n=7; aNoneTrue"},
    {"Operators_Comparisons",
     "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ (1, 2) ="
     "= [1, 2] }} {{ none == none }}",
     "True False True True True False True"},
    {"Operators_Membership",
     "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'role' in messa"
     "ges[0] }}",
     "True True True True True"},
    {"Operators_LogicReturnsOperands",
     "{{ n and 'yes' }} {{ 0 and 'yes' }} {{ '' or 'fallback' }} {{ none or 0 or 'last' }} {{ not n }}"
     " {{ not not n }}",
     "yes 0 fallback last False True"},
    {"Operators_Ternary",
     "{{ 'big' if n > 5 else 'small' }} {{ 'a' if false else 'b' if false else 'c' }} [{{ 'x' if false"
     " }}]",
     "big c []"},
    {"Access_AttributeFallsBackToItem",
     "{{ user.name }} {{ user['name'] }} {{ user.tags[1] }} {{ user.tags.0 }} {{ messages[-1].role }}",
     "Ada Ada y x assistant"},
    {"Access_MissingKeysAreUndefined",
     "[{{ user.age }}] [{{ user['age'] }}] [{{ user.tags[9] }}] {{ user.age is defined }}",
     "[] [] [] False"},
    {"Access_DictMethodsWinOverKeys",
     "{{ {'items': 1}['items'] }} {{ user.get('name') }} {{ user.get('x', 'd') }} {{ user.keys()|list "
     "}}",
     "1 Ada d ['name', 'tags']"},
    {"Access_Slices",
     "{{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ [1, 2, 3, 4][1:] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3]"
     "[-2:] }} {{ 'héllo'[-1] }}",
     "él cba [2, 3, 4] [1, 3] [2, 3] o"},
    {"Printing_PythonStr",
     "{{ 1.0 }} {{ 1e16 }} {{ 1.5e-05 }} {{ 123.456 }} {{ -0.0 }} {{ 1/3 }} {{ true }} {{ none }} {{ u"
     "ndefined_name }}|",
     "1.0 1e+16 1.5e-05 123.456 -0.0 0.3333333333333333 True None |"},
    {"Printing_PythonRepr",
     "{{ messages[1] }} {{ user }} {{ [1.0, none, 'x'] }}",
     "{'role': 'user', 'content': 'Hi there'} {'name': 'Ada', 'tags': ['x', 'y']} [1.0, None, 'x']"},
    {"Loops_LoopVariables",
     "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{"
     "{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}",
     "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 "},
    {"Loops_PrevNextCycleChanged",
     "{% for x in [1, 1, 2] %}{{ loop.previtem|default('-') }}{{ loop.nextitem|default('-') }}{{ loop."
     "cycle('a', 'b') }}{{ loop.changed(x) }} {% endfor %}",
     "-1aTrue 12bFalse 1-aTrue "},
    {"Loops_BreakContinue",
     "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% en"
     "dif %}{{ i }}{% endfor %}",
     "0246"},
    {"Loops_FilterAndElse",
     "{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }} {{ m.content }}{% "
     "endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
     "1/1 Hi there|empty"},
    {"Loops_Unpacking",
     "{% for k, v in user.items() %}{{ k }}={{ v }};{% endfor %} {% for a, b in [[1, 2], 'xy'] %}{{ a "
     "}}{{ b }}{% endfor %}",
     "name=Ada;tags=['x', 'y']; 12xy"},
    {"Loops_IterationScopeDoesNotLeak",
     "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }} {% endfor %}{{ x }}",
     "outer1 outer2 outer"},
    {"Loops_Recursive",
     "{% for x in [1, [2, [3]], 4] recursive %}{% if x is iterable %}[{{ loop(x) }}]{% else %}{{ x }}:"
     "{{ loop.depth }}{% endif %}{% endfor %}",
     "1:1[2:2[3:3]]4:1"},
    {"Loops_IteratesStringsAndDicts",
     "{% for c in 'hé' %}{{ c }}.{% endfor %} {% for k in user %}{{ k }},{% endfor %}",
     "h.é. name,tags,"},
    {"Conditionals_IfElifElse",
     "{% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %} {% endf"
     "or %}",
     "zero one many "},
    {"Conditionals_Truthiness",
     "{% for v in [0, 1, '', 'a', [], [0], {}, none, flag, undefined_name] %}{{ 'T' if v else 'F' }}{%"
     " endfor %}",
     "FTFTFTFFFF"},
    {"Assignment_SetAndTupleSet",
     "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a + b + c }}",
     "6"},
    {"Assignment_BlockSetWithFilter",
     "{% set x %}  Hello {{ user.name }}  {% endset %}[{{ x }}]{% set y | trim | upper %}  shout  {% e"
     "ndset %}[{{ y }}]",
     "[  Hello Ada  ][SHOUT]"},
    {"Assignment_NamespaceCarriesStateOutOfLoops",
     "{% set ns = namespace(count=0, last='') %}{% for m in messages %}{% set ns.count = ns.count + 1 "
     "%}{% set ns.last = m.role %}{% endfor %}{{ ns.count }} {{ ns.last }} {{ ns }}",
     "3 assistant <Namespace {'count': 3, 'last': 'assistant'}>"},
    {"Assignment_WithScope",
     "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "3[]"},
    {"Assignment_IfDoesNotOpenAScope",
     "{% if true %}{% set z = 'set in if' %}{% endif %}{{ z }}",
     "set in if"},
    {"Macros_DefaultsAndKeywords",
     "{% macro m(a, b='B', c=a ~ '!') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{"
     " m(c='C', a='A') }} [{{ m() }}]",
     "1B1! 121! ABC [B!]"},
    {"Macros_VarargsKwargs",
     "{% macro m(a) %}{{ a }} {{ varargs }} {{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}",
     "1 (2, 3) {'x': 4}"},
    {"Macros_CallBlockWithCaller",
     "{% macro box(title) %}[{{ title }}:{{ caller('arg') }}]{% endmacro %}{% call(x) box('t') %}got {"
     "{ x }}{% endcall %}",
     "[t:got arg]"},
    {"Macros_Recursion",
     "{% macro fact(k) %}{{ 1 if k <= 1 else k * fact(k - 1)|int }}{% endmacro %}{{ fact(6) }}",
     "720"},
    {"Macros_ClosureSeesLaterAssignments",
     "{% macro m() %}{{ v }}{% endmacro %}{% set v = 1 %}{{ m() }}{% set v = 2 %}{{ m() }}",
     "12"},
    {"Macros_FilterBlock",
     "{% filter upper %}{% for m in messages %}{{ m.role }} {% endfor %}{% endfilter %}",
     "SYSTEM USER ASSISTANT "},
    {"Filters_Strings",
     "{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'hi'|upper }}|{{ 'HI'|lower }}|{{ 'hello world-w"
     "ide (x)'|title }}|{{ 'hELLO'|capitalize }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|center(6) }}"
     "|",
     "hi|hi|HI|hi|Hello World-Wide (X)|Hello|bba|  ab  |"},
    {"Filters_MoreStrings",
     "{{ 'one two three'|wordcount }} {{ 'a\\nb'|indent(2) }} {{ 'a\\nb'|indent(2, true) }} {{ 'hello "
     "world'|truncate(8, leeway=0) }} {{ '%s=%d'|format('x', 3) }} {{ 5|string }} {{ '<b>'|e }} {{ '<b"
     ">'|safe }}",
     "3 a\n  b   a\n  b hello... x=3 5 &lt;b&gt; <b>"},
    {"Filters_Sequences",
     "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} {{ [1, 2, 2, "
     "1]|unique|list }} {{ [1, 2, 3]|reverse|list }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ [1, 2]|le"
     "ngth }} {{ 'abc'|list }} {{ [1, 2]|join('-') }}",
     "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b'] [1, 2] [3, 2, 1] 1 2 2 ['a', 'b', 'c'] 1-2"},
    {"Filters_MapSelectReject",
     "{{ messages|map(attribute='role')|join(',') }} {{ messages|selectattr('role', 'equalto', 'user')"
     "|map(attribute='content')|list }} {{ messages|rejectattr('role', 'in', ['system'])|list|length }"
     "} {{ range(6)|select('even')|list }} {{ range(6)|reject('odd')|list }} {{ ['a', 'b']|map('upper'"
     ")|list }}",
     "system,user,assistant ['Hi there'] 2 [0, 2, 4] [0, 2, 4] ['A', 'B']"},
    {"Filters_GroupingAndAggregates",
     "{% for g in messages|groupby('role') %}{{ g.grouper }}={{ g.list|length }} {% endfor %}{{ [1, 2,"
     " 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [3, 9, 4]|max }} {{ [3, 9, 4]|"
     "min }} {{ [1, 2.5]|sum }}",
     "assistant=1 system=1 user=1 [[1, 2], [3, 4], [5]] [[1, 2, 3], [4, 5]] 9 3 3.5"},
    {"Filters_DictFilters",
     "{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ user|items|list }"
     "} {{ user|length }}",
     "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('name', 'Ada'), ('tags', ['x', 'y'])] 2"},
    {"Filters_Numbers",
     "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ '0x1A'|int(0, 16) }} {{ 3.9|in"
     "t }} {{ '2.5'|float }} {{ 'x'|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|r"
     "ound(2) }} {{ 3.7|round(method='floor') }} {{ 3|round }}",
     "42 4 0 -1 26 3 2.5 0.0 3 2.0 4.0 3.14 3.0 3"},
    {"Filters_DefaultFilter",
     "[{{ undefined_name|default('d') }}] [{{ ''|default('d') }}] [{{ ''|default('d', true) }}] [{{ no"
     "ne|d('d') }}] [{{ none|d('d', boolean=true) }}]",
     "[d] [] [d] [None] [d]"},
    {"Filters_ToJsonKeepsOrderAndUnicode",
     "{{ {'b': 1, 'a': [1.0, none, true, 'é<&>']}|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ {'b"
     "': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }}",
     "{\"b\": 1, \"a\": [1.0, null, true, \"é<&>\"]} \"\\u00e9\" {\"a\": 2, \"b\": 1} [1,2]"},
    {"Filters_ToJsonIndent",
     "{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}",
     "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"},
    {"Tests_TypeTests",
     "{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{"
     " 'a' is string }}{{ user is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ 1 is iterable "
     "}}{{ none is none }}{{ true is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}",
     "TrueTrueTrueFalseTrueTrueTrueTrueTrueFalseTrueTrueTrueFalseTrue"},
    {"Tests_ValueTests",
     "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 2 is eq 2 }}{{ 2 is"
     " ne 2 }}{{ 3 is gt 2 }}{{ 3 is ge 4 }}{{ 1 is lt 2 }}{{ 1 is le 0 }}{{ 'ab' is lower }}{{ 'AB' i"
     "s upper }}{{ 2 is equalto 2 }}{{ 2 is greaterthan 1 }}",
     "TrueTrueTrueTrueTrueFalseTrueFalseTrueFalseTrueTrueTrueTrue"},
    {"Tests_DefinedAndNegation",
     "{{ user is defined }}{{ undefined_name is defined }}{{ undefined_name is undefined }}{{ user.age"
     " is not defined }}{{ flag is not none }}{{ 'upper' is filter }}{{ 'odd' is test }}",
     "TrueFalseTrueTrueFalseTrueTrue"},
    {"Methods_StringMethods",
     "{{ '  a b  '.strip() }}|{{ 'xax'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
     "{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.e"
     "ndswith(('x', 'c')) }}|{{ 'hello'.find('l') }}|{{ 'hello'.count('l') }}|{{ 'a-b'.replace('-', '+"
     "') }}|{{ '-'.join(['a', 'b']) }}|{{ 'hi'.upper() }}|{{ 'a b'.title() }}",
     "a b|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|True|True|2|2|a+b|a-b|HI|A B"},
    {"Methods_StrFormat",
     "{{ '{} {}'.format('a', 1) }} {{ '{0}{0}'.format('x') }} {{ '{name}:{n:>4}'.format(name='k', n=7)"
     " }} {{ '{:.2f}'.format(2.5) }} {{ '{:05d}'.format(42) }}",
     "a 1 xx k:   7 2.50 00042"},
    {"Methods_ListMethodsTheSandboxAllows",
     "{% set l = [1, 2, 3] %}{{ l.index(2) }} {{ l.count(3) }} {{ l.pop() }} {{ l }}",
     "1 1 3 [1, 2]"},
    {"Globals_RangeDictNamespace",
     "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ dict(a=1, b=[2]) }} "
     "{{ namespace(x=1).x }}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': [2]} 1"},
    {"Globals_CyclerAndJoiner",
     "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }} {% set j = joiner('|') "
     "%}{{ j() }}x{{ j() }}y",
     "aba x|y"},
    {"Globals_GenerationBlockRendersItsBody",
     "{% generation %}assistant text{% endgeneration %}",
     "assistant text"},
};

class JinjaRenders : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaRenders, LikeJinja2) {
  const RenderCase& c = GetParam();
  EXPECT_EQ(render(c.source), c.expected) << "template: " << c.source;
}

INSTANTIATE_TEST_SUITE_P(Features, JinjaRenders, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<RenderCase>& param) { return std::string(param.param.name); });

// --- context values --------------------------------------------------------------------

TEST(JinjaContext, KeepsJsonKeyOrderAndNumberKinds) {
  const auto context = ordered_json::parse(R"({"tool": {"zeta": 1, "alpha": 2.0, "mid": [3, 4.5]}})");
  EXPECT_EQ(render("{{ tool|tojson }} {{ tool }} {% for k in tool %}{{ k }}{% endfor %}", context),
            R"({"zeta": 1, "alpha": 2.0, "mid": [3, 4.5]} {'zeta': 1, 'alpha': 2.0, 'mid': [3, 4.5]} zetaalphamid)");
}

TEST(JinjaContext, MustBeAnObject) {
  const Template t = Template::parse("x");
  EXPECT_THROW(t.render(ordered_json::array()), Error);
}

TEST(JinjaContext, ParsedTemplateRendersManyTimesAndFromManyThreads) {
  const Template t = Template::parse("{% for m in messages %}{{ m.role }};{% endfor %}{{ n * 2 }}");
  const std::string expected = "system;user;assistant;14";
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) outputs[i] = t.render(default_context());
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& out : outputs) EXPECT_EQ(out, expected);
  const Template copy = t;  // templates share their parsed form
  EXPECT_EQ(copy.render(default_context()), expected);
}

// --- errors where jinja2 raises ----------------------------------------------------------

TEST(JinjaRuntimeErrors, UseOfUndefinedValues) {
  EXPECT_THAT(render_error("{{ missing.attr }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ missing() }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ missing + 1 }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ user.age.years }}"), HasSubstr("'dict object' has no attribute 'age'"));
}

TEST(JinjaRuntimeErrors, PythonTypeErrors) {
  EXPECT_THAT(render_error("{{ 'a' + 1 }}"), HasSubstr("can only concatenate str"));
  EXPECT_THAT(render_error("{% for x in 5 %}{% endfor %}"), HasSubstr("'int' object is not iterable"));
  EXPECT_THAT(render_error("{{ 1 < 'a' }}"), HasSubstr("not supported between"));
  EXPECT_THAT(render_error("{{ 1 // 0 }}"), HasSubstr("division or modulo by zero"));
  // Filters like map return one-shot generators, which have no length in jinja2.
  EXPECT_THAT(render_error("{{ messages|map(attribute='role')|length }}"), HasSubstr("has no len()"));
  EXPECT_THAT(render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), HasSubstr("takes not more than 1"));
}

TEST(JinjaRuntimeErrors, SandboxRefusesMutatingMethods) {
  // The refused method reads as an undefined value; calling it raises.
  EXPECT_EQ(render("[{{ [].append }}] {{ [].append is defined }}"), "[] False");
  EXPECT_THAT(render_error("{% set l = [] %}{{ l.append(1) }}"), HasSubstr("access to attribute 'append'"));
  EXPECT_THAT(render_error("{{ user.update({'a': 1}) }}"), HasSubstr("is unsafe"));
  EXPECT_THAT(render_error("{% set user.name = 'x' %}"), HasSubstr("non-namespace object"));
}

TEST(JinjaRuntimeErrors, RaiseExceptionCarriesTheMessageAndPosition) {
  const std::string message = render_error("line one\n  {{ raise_exception('Roles must alternate') }}");
  EXPECT_THAT(message, HasSubstr("Roles must alternate"));
  EXPECT_THAT(message, HasSubstr("line 2, column 6"));
}

TEST(JinjaRuntimeErrors, UnknownFilterInsideIfFailsOnlyWhenReached) {
  EXPECT_EQ(render("{% if false %}{{ x|no_such_filter }}{% endif %}ok"), "ok");
  EXPECT_THAT(render_error("{% if true %}{{ x|no_such_filter }}{% endif %}"), HasSubstr("no filter named 'no_such_filter'"));
}

// --- syntax errors ------------------------------------------------------------------------

TEST(JinjaSyntaxErrors, NameTheProblemAndPosition) {
  struct Case {
    const char* source;
    const char* expected;
  };
  const Case cases[] = {
      {"{% if x %}open", "line 1, column 15: unexpected end of template: expected {% elif %}, {% else %} or "
                         "{% endif %} to close the 'if' tag at line 1, column 4"},
      {"a\n{% for x in y %}{% endif %}", "line 2, column 20: unknown tag 'endif'; expected {% endfor %} or "
                                         "{% else %} to close the 'for' tag at line 2, column 4"},
      {"{% frobnicate %}", "line 1, column 4: unknown tag 'frobnicate'"},
      {"{{ 1 + }}", "line 1, column 8: unexpected '}}'"},
      {"{{ 'open }}", "line 1, column 4: unterminated string literal"},
      {"{# open", "line 1, column 1: missing end of comment tag"},
      {"{{ x", "line 1, column 1: unexpected end of template: this '{{' is never closed"},
      {"{{ (1, 2] }}", "line 1, column 9: unexpected ']', expected ')'"},
      {"{{ x|no_such }}", "line 1, column 6: no filter named 'no_such'"},
      {"{{ x is no_such }}", "line 1, column 6: no test named 'no_such'"},
      {"{% break %}", "line 1, column 4: 'break' outside of a for loop"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "non-default argument follows default argument"},
      {"{% set 1 = 2 %}", "can't assign to this expression"},
      {"{% include 'x' %}", "the 'include' tag is not supported"},
      {"{{ a $ b }}", "line 1, column 6: unexpected character '$'"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(render_error(c.source), HasSubstr(c.expected)) << c.source;
  }
}

TEST(JinjaSyntaxErrors, DeepNestingIsRefusedNotACrash) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_THAT(render_error(deep), HasSubstr("nests more than"));
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_THAT(render_error(blocks), HasSubstr("nests more than"));
}

// --- limits --------------------------------------------------------------------------------

TEST(JinjaLimits, RunawayMacroRecursion) {
  EXPECT_THAT(render_error("{% macro r(k) %}{{ r(k + 1) }}{% endmacro %}{{ r(0) }}"), HasSubstr("nested more than"));
}

TEST(JinjaLimits, HugeRangesAsInTheSandbox) {
  EXPECT_THAT(render_error("{% for i in range(10**9) %}{% endfor %}"), HasSubstr("Range too big"));
  EXPECT_EQ(render("{{ range(100000)|length }}"), "100000");
}

TEST(JinjaLimits, TotalWork) {
  Limits limits;
  limits.max_steps = 100000;
  EXPECT_THAT(render_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                           default_context(), limits),
              HasSubstr("steps"));
}

TEST(JinjaLimits, OutputAndStringSize) {
  Limits limits;
  limits.max_output_bytes = 1 << 20;
  EXPECT_THAT(render_error("{% for i in range(2000) %}{{ 'x' * 1000 }}{% endfor %}", default_context(), limits),
              HasSubstr("over the limit"));
  limits = Limits{};
  limits.max_string_bytes = 1 << 20;
  EXPECT_THAT(render_error("{% set s %}{% for i in range(2000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}",
                           default_context(), limits),
              HasSubstr("over the limit"));
  EXPECT_THAT(render_error("{{ 'x' * 10**12 }}"), HasSubstr("over the limit"));
  EXPECT_THAT(render_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
              HasSubstr("over the limit"));
}

TEST(JinjaLimits, NamespaceCyclesAndChains) {
  // A namespace holding itself prints like a recursive Python dict, and is freed.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), "<Namespace {'me': <Namespace {...}>}>");
  // A long chain of namespaces is dropped mid-render without deep recursion.
  EXPECT_EQ(render("{% set ns = namespace(x=none) %}{% for i in range(50000) %}{% set ns.x = namespace(y=ns.x) %}"
                   "{% endfor %}{% set ns.x = 1 %}done"),
            "done");
  EXPECT_THAT(render_error("{% set ns = namespace(x=none) %}{% for i in range(3000) %}{% set ns.x = namespace(y=ns.x) %}"
                           "{% endfor %}{{ ns }}"),
              HasSubstr("too deeply to print"));
  Limits limits;
  limits.max_namespaces = 100;
  EXPECT_THAT(render_error("{% for i in range(200) %}{% set ns = namespace() %}{% endfor %}", default_context(), limits),
              HasSubstr("namespace() objects"));
}

TEST(JinjaLimits, NestingDepthOfValues) {
  EXPECT_THAT(render_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
              HasSubstr("nested more than 512 levels"));
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 2000; ++i) deep = ordered_json::array({deep});
  EXPECT_THROW(Template::parse("{{ x }}").render({{"x", deep}}), Error);
}

TEST(JinjaLimits, IntegersAre64Bit) {
  EXPECT_EQ(render("{{ 2 ** 62 }}"), "4611686018427387904");
  EXPECT_THAT(render_error("{{ 2 ** 64 }}"), HasSubstr("integer overflow"));
}

}  // namespace
}  // namespace ernie::jinja
