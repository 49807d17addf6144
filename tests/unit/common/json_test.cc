#include "common/json.h"
#include "common/logging.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace psync {
namespace json {
namespace {

Value MustParse(const std::string& text) {
  auto v = Parse(text);
  EXPECT_TRUE(v.ok()) << text << " -> " << v.status();
  return v.ok() ? *v : Value();
}

// Expects a parse error whose message contains `needle` (and the byte offset).
void ExpectError(const std::string& text, const std::string& needle, long offset = -1) {
  auto v = Parse(text);
  ASSERT_FALSE(v.ok()) << "accepted: " << text;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(v.status().message());
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\ninput: " << text;
  if (offset >= 0) {
    EXPECT_NE(msg.find("at byte " + std::to_string(offset) + ":"), std::string::npos) << msg;
  }
}

TEST(Json, Scalars) {
  EXPECT_TRUE(MustParse("null").is_null());
  EXPECT_EQ(MustParse("true").bool_value(), true);
  EXPECT_EQ(MustParse(" false ").bool_value(), false);
  EXPECT_EQ(MustParse("\"hi\"").string_value(), "hi");
  Value i = MustParse("-42");
  ASSERT_TRUE(i.is_int());
  EXPECT_EQ(i.int_value(), -42);
  EXPECT_EQ(i.number(), -42.0);
  Value d = MustParse("2.5e-1");
  EXPECT_FALSE(d.is_int());
  EXPECT_DOUBLE_EQ(d.number(), 0.25);
  EXPECT_FALSE(MustParse("1.0").is_int());
  EXPECT_EQ(MustParse("0").int_value(), 0);
  EXPECT_EQ(MustParse("-0").int_value(), 0);
}

TEST(Json, Int64Exact) {
  Value big = MustParse("9223372036854775807");
  ASSERT_TRUE(big.is_int());
  EXPECT_EQ(big.int_value(), std::numeric_limits<int64_t>::max());
  Value small = MustParse("-9223372036854775808");
  ASSERT_TRUE(small.is_int());
  EXPECT_EQ(small.int_value(), std::numeric_limits<int64_t>::min());
  // Beyond int64: still a number, as a double.
  Value over = MustParse("9223372036854775808");
  EXPECT_FALSE(over.is_int());
  EXPECT_DOUBLE_EQ(over.number(), 9223372036854775808.0);
  // Exact values above 2^53 survive a round trip.
  EXPECT_EQ(Serialize(MustParse("9007199254740993")), "9007199254740993");
}

TEST(Json, NestedAndOrder) {
  Value v = MustParse(R"({"b": [1, 2, {"c": null}], "a": {"x": "y"}, "z": true})");
  ASSERT_TRUE(v.is_object());
  const Object& o = v.object();
  ASSERT_EQ(o.size(), 3u);
  auto it = o.begin();
  EXPECT_EQ(it->first, "b");
  EXPECT_EQ((++it)->first, "a");
  EXPECT_EQ((++it)->first, "z");
  EXPECT_EQ(v.Find("b")->array().size(), 3u);
  EXPECT_TRUE(v.Find("b")->array()[2].Find("c")->is_null());
  EXPECT_EQ(v.Find("a")->Find("x")->string_value(), "y");
  EXPECT_EQ(v.Find("missing"), nullptr);
  EXPECT_EQ(Serialize(v), R"({"b":[1,2,{"c":null}],"a":{"x":"y"},"z":true})");
}

TEST(Json, Escapes) {
  Value v = MustParse(R"("a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\u20ac\ud83d\ude00")");
  EXPECT_EQ(v.string_value(), "a\"b\\c/d\b\f\n\r\tA\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  // Writer escapes quotes, backslashes and control characters, keeps UTF-8.
  EXPECT_EQ(Serialize(Value(std::string("q\"\\\n\x01\xC3\xA9"))), "\"q\\\"\\\\\\n\\u0001\xC3\xA9\"");
  // Round trip.
  EXPECT_EQ(MustParse(Serialize(v)), v);
  // Raw UTF-8 is accepted.
  EXPECT_EQ(MustParse("\"\xE2\x82\xAC\"").string_value(), "\xE2\x82\xAC");
}

TEST(Json, RejectsBadStrings) {
  ExpectError(R"("\x")", "invalid escape", 1);
  ExpectError(R"("\u12G4")", "invalid hex digit");
  ExpectError(R"("\u12")", "\\u escape");
  ExpectError(R"("\ud800")", "high surrogate");
  ExpectError(R"("\ud800\u0041")", "high surrogate");
  ExpectError(R"("\udc00")", "lone low surrogate");
  ExpectError("\"abc", "unterminated string", 0);
  ExpectError("\"a\nb\"", "control character", 2);
  ExpectError("\"\xC3\"", "continuation byte");
  ExpectError("\"\xC0\xAF\"", "lead byte");          // overlong '/'
  ExpectError("\"\xE0\x80\xAF\"", "overlong");
  ExpectError("\"\xED\xA0\x80\"", "surrogate");      // UTF-8 encoded U+D800
  ExpectError("\"\xF4\x90\x80\x80\"", "above U+10FFFF");
  ExpectError("\"\xFF\"", "lead byte");
  ExpectError("\"\xE2\x82", "truncated UTF-8");
}

TEST(Json, RejectsBadSyntax) {
  ExpectError("", "empty input");
  ExpectError("   ", "empty input");
  ExpectError("[1,]", "expected a value", 3);
  ExpectError("{\"a\":1,}", "expected a string key", 7);
  ExpectError("{\"a\" 1}", "expected ':'", 5);
  ExpectError("{a:1}", "expected a string key", 1);
  ExpectError("[1 2]", "expected ',' or ']'", 3);
  ExpectError("{\"a\":1 \"b\":2}", "expected ',' or '}'", 7);
  ExpectError("[1", "expected ',' or ']'");
  ExpectError("tru", "invalid literal");
  ExpectError("nul", "invalid literal");
  ExpectError("NaN", "expected a value");
  ExpectError("Infinity", "expected a value");
  ExpectError("// c\n1", "expected a value");
  ExpectError("1 2", "trailing data", 2);
  ExpectError("{} x", "trailing data", 3);
  ExpectError("01", "leading zeros");
  ExpectError("-", "expected a digit");
  ExpectError("1.", "digit after '.'");
  ExpectError(".5", "expected a value");
  ExpectError("1e", "exponent");
  ExpectError("+1", "expected a value");
  ExpectError("1e999", "out of range");
  EXPECT_EQ(MustParse("1e-999").number(), 0.0);  // underflow rounds to 0
}

TEST(Json, RejectsDuplicateKeys) {
  ExpectError(R"({"w": 1, "w": 2})", "duplicate object key \"w\"", 9);
  // Same key in different objects is fine.
  MustParse(R"({"a": {"w": 1}, "b": {"w": 2}})");
}

TEST(Json, DepthLimit) {
  std::string ok = std::string(64, '[') + std::string(64, ']');
  MustParse(ok);
  std::string deep = std::string(65, '[') + std::string(65, ']');
  ExpectError(deep, "nesting deeper than the limit of 64", 64);
  // Very deep input fails cleanly instead of overflowing the stack.
  std::string huge(1 << 20, '[');
  ExpectError(huge, "nesting deeper");
  ParseOptions opt;
  opt.max_depth = 2;
  EXPECT_FALSE(Parse("[[[1]]]", opt).ok());
  EXPECT_TRUE(Parse("[[1]]", opt).ok());
}

TEST(Json, SizeLimit) {
  ParseOptions opt;
  opt.max_size = 10;
  auto v = Parse("[1,2,3,4,5,6]", opt);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.status().message()).find("over the limit of 10 bytes"), std::string::npos);
}

TEST(Json, BuildAndSerialize) {
  Value v = Value::MakeObject();
  v.Set("name", "psync").Set("step", 10).Set("loss", 0.25).Set("ok", true).Set("none", nullptr);
  Value arr = Value::MakeArray();
  arr.Append(1).Append(int64_t{1} << 40).Append(-0.5).Append("s");
  v.Set("list", arr);
  v.Set("step", 11);  // replace keeps position
  EXPECT_EQ(Serialize(v),
            R"({"name":"psync","step":11,"loss":0.25,"ok":true,"none":null,"list":[1,1099511627776,-0.5,"s"]})");
  EXPECT_EQ(MustParse(Serialize(v)), v);
  EXPECT_EQ(MustParse(Serialize(v, true)), v);
  EXPECT_EQ(Serialize(Value::MakeObject(), true), "{}");
  EXPECT_EQ(Serialize(Value::MakeArray(), true), "[]");
  Value small = Value::MakeObject();
  small.Set("a", Array{1, 2});
  EXPECT_EQ(Serialize(small, true), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
}

TEST(Json, DoublesRoundTripShortest) {
  for (double d : {0.1, 1.0 / 3.0, 1e300, -2.5e-300, 123456.789, 5e-324}) {
    std::string s = Serialize(Value(d));
    Value back = MustParse(s);
    EXPECT_EQ(back.number(), d) << s;
  }
  EXPECT_EQ(Serialize(Value(0.1)), "0.1");
  EXPECT_EQ(Serialize(Value(std::nan(""))), "null");
  EXPECT_EQ(Serialize(Value(std::numeric_limits<double>::infinity())), "null");
}

TEST(Json, ObjectApi) {
  Object o{{"a", 1}, {"b", 2}};
  EXPECT_TRUE(o.Contains("a"));
  EXPECT_FALSE(o.Insert("a", 5));
  EXPECT_EQ(o.Find("a")->int_value(), 1);
  EXPECT_TRUE(o.Erase("a"));
  EXPECT_FALSE(o.Contains("a"));
  EXPECT_EQ(o.Find("b")->int_value(), 2);
  EXPECT_EQ(o.size(), 1u);
}

TEST(Json, WrongTypeAccessThrows) {
  Value v(3);
  EXPECT_THROW((void)v.string_value(), InternalError);
  EXPECT_THROW((void)Value(1.5).int_value(), InternalError);
  EXPECT_EQ(v.Find("x"), nullptr);  // Find on a non-object is just "absent"
}

TEST(Json, Quote) {
  EXPECT_EQ(Quote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(Quote(absl::string_view("\0", 1)), "\"\\u0000\"");
}

}  // namespace
}  // namespace json
}  // namespace psync
