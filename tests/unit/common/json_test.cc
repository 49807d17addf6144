// common/json: nlohmann::ordered_json plus strict, bounded parsing with
// absl::Status errors (what psync adds on top of the library).
#include "common/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace psync::json {
namespace {

Json MustParse(const std::string& text) {
  auto v = Parse(text);
  EXPECT_TRUE(v.ok()) << text << " -> " << v.status();
  return v.ok() ? *v : Json();
}

// Expects InvalidArgument whose message contains `needle`.
void ExpectError(const std::string& text, const std::string& needle) {
  auto v = Parse(text);
  ASSERT_FALSE(v.ok()) << "accepted: " << text;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(v.status().message());
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\ninput: " << text;
}

TEST(Json, ScalarsAndExactIntegers) {
  EXPECT_TRUE(MustParse("null").is_null());
  EXPECT_EQ(MustParse(" true ").get<bool>(), true);
  EXPECT_EQ(MustParse("\"hi\"").get<std::string>(), "hi");
  EXPECT_EQ(MustParse("-42").get<int64_t>(), -42);
  EXPECT_TRUE(MustParse("18446744073709551615").is_number_unsigned());
  EXPECT_EQ(MustParse("18446744073709551615").get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(MustParse("1.0").is_number_float());
  EXPECT_EQ(Serialize(MustParse("9007199254740993")), "9007199254740993");
}

TEST(Json, KeepsInsertionOrder) {
  Json v = MustParse(R"({"b": [1, 2, {"c": null}], "a": {"x": "y"}, "z": true})");
  EXPECT_EQ(Serialize(v), R"({"b":[1,2,{"c":null}],"a":{"x":"y"},"z":true})");
  Json out = Json::object();
  out["rank"] = 1;
  out["loss"] = 0.5;
  out["name"] = "x";
  EXPECT_EQ(Serialize(out), R"({"rank":1,"loss":0.5,"name":"x"})");
  EXPECT_EQ(Serialize(out, true), "{\n  \"rank\": 1,\n  \"loss\": 0.5,\n  \"name\": \"x\"\n}");
}

TEST(Json, StrictSyntaxWithByteOffsets) {
  ExpectError("{\"a\": 1,}", "invalid JSON at byte 9");
  ExpectError("[1 2]", "invalid JSON at byte 4");
  ExpectError("01", "invalid JSON at byte");
  ExpectError("NaN", "invalid JSON at byte 1");
  ExpectError("// c\n1", "invalid JSON at byte");
  ExpectError("{\"a\": 1} x", "trailing data after the JSON value");
  ExpectError("\"\xff\"", "invalid JSON at byte");  // not UTF-8
  ExpectError("", "invalid JSON at byte");
  // nlohmann alone stops at a NUL and would accept these.
  ExpectError(std::string("{\"a\": 1}\0 x", 11), "invalid JSON at byte 9: a NUL byte");
  ExpectError(std::string("{\"a\": \"b\0\"}", 11), "invalid JSON at byte 9: a NUL byte");
}

TEST(Json, RejectsDuplicateKeysAtAnyDepth) {
  ExpectError(R"({"a": 1, "a": 2})", "duplicate object key \"a\"");
  ExpectError(R"({"x": {"b": 1, "b": 1}})", "duplicate object key \"b\"");
  MustParse(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})");  // same key in different objects is fine
}

TEST(Json, DepthAndSizeLimits) {
  ParseOptions opt;
  opt.max_depth = 4;
  EXPECT_TRUE(Parse("[[[[1]]]]", opt).ok());
  auto deep = Parse("[[[[[1]]]]]", opt);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(std::string(deep.status().message()).find("nesting deeper than the limit of 4 levels"), std::string::npos);
  // The default depth (64) also stops a pathological input without recursion trouble.
  EXPECT_FALSE(Parse(std::string(100000, '[')).ok());
  opt.max_size = 3;
  auto big = Parse("1234", opt);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(std::string(big.status().message()).find("JSON text is 4 bytes; the limit is 3"), std::string::npos);
}

TEST(Json, SerializeNonFiniteAndInvalidUtf8WithoutThrowing) {
  Json o = Json::object();
  o["nan"] = std::nan("");
  o["inf"] = std::numeric_limits<double>::infinity();
  o["bad"] = std::string("a\xff" "b");
  EXPECT_EQ(Serialize(o), "{\"nan\":null,\"inf\":null,\"bad\":\"a\xEF\xBF\xBD" "b\"}");
}

TEST(Json, QuoteAndTypeName) {
  EXPECT_EQ(Quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  EXPECT_STREQ(TypeName(MustParse("[]")), "array");
  EXPECT_STREQ(TypeName(MustParse("{}")), "object");
  EXPECT_STREQ(TypeName(MustParse("-1")), "number");
  EXPECT_STREQ(TypeName(MustParse("1.5")), "number");
  EXPECT_STREQ(TypeName(MustParse("\"\"")), "string");
  EXPECT_STREQ(TypeName(MustParse("false")), "boolean");
  EXPECT_STREQ(TypeName(MustParse("null")), "null");
}

TEST(Json, ParseSerializeRoundTrip) {
  const std::string text = R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(Serialize(MustParse(text)), text);
  EXPECT_EQ(MustParse(Serialize(MustParse(text))), MustParse(text));
}

}  // namespace
}  // namespace psync::json
