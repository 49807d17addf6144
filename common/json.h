// A small, strict JSON value type with a parser and a writer.
//
// Used for safetensors headers, the worker's --summary and Chrome --trace
// output, and `psyncctl --json`. We keep our own (about 600 lines) rather than
// add a dependency: Debian 12 has no JSON library we already pull in, and the
// parser sits on an untrusted-input path (checkpoint headers), so we want it
// small, fuzzed, and with hard limits.
//
//   PSYNC_ASSIGN_OR_RETURN(json::Value v, json::Parse(text));
//   const json::Value* shape = v.Find("shape");
//   json::Value out = json::Value::MakeObject();
//   out.Set("loss", 0.25).Set("step", 10);
//   std::string s = json::Serialize(out, /*pretty=*/true);
//
// Strictness (RFC 8259, plus): no comments, no trailing commas, no leading
// zeros, no NaN/Infinity, no control characters inside strings, escapes and
// raw bytes must form valid UTF-8 (lone surrogates are rejected), duplicate
// object keys are rejected, nothing but whitespace may follow the value.
// Errors name the byte offset and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {
namespace json {

class Value;

using Array = std::vector<Value>;

// An object that keeps its members in insertion order (so output is stable
// and matches what the writer put in), with O(1) lookup by key.
class Object {
 public:
  using Member = std::pair<std::string, Value>;
  using const_iterator = std::vector<Member>::const_iterator;
  using iterator = std::vector<Member>::iterator;

  Object() = default;
  Object(std::initializer_list<Member> members);

  // (Defined below Value: they need Value to be a complete type.)
  size_t size() const;
  bool empty() const;
  const_iterator begin() const;
  const_iterator end() const;
  // Values may be modified through these; keys must not be.
  iterator begin();
  iterator end();

  bool Contains(absl::string_view key) const { return Find(key) != nullptr; }
  const Value* Find(absl::string_view key) const;
  Value* Find(absl::string_view key);
  // Inserts at the end, or replaces the value in place (keeping its position).
  void Set(std::string key, Value value);
  // Inserts only if absent; returns false (and changes nothing) otherwise.
  bool Insert(std::string key, Value value);
  bool Erase(absl::string_view key);

  bool operator==(const Object& other) const;  // same members, same order
  bool operator!=(const Object& other) const { return !(*this == other); }

 private:
  void Reindex();
  std::vector<Member> members_;
  std::unordered_map<std::string, size_t> index_;
};

enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
const char* TypeName(Type type);  // "null", "bool", "number", ...

class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : type_(Type::kBool), bool_(b) {}
  // Any integer type: stored exactly as int64 (and as a double for number()).
  template <typename T,
            std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value, int> = 0>
  Value(T i) : type_(Type::kNumber), is_int_(true), int_(static_cast<int64_t>(i)),
               double_(static_cast<double>(i)) {}
  Value(double d) : type_(Type::kNumber), double_(d) {}
  Value(float f) : Value(static_cast<double>(f)) {}
  Value(const char* s) : type_(Type::kString), string_(s) {}
  Value(std::string s) : type_(Type::kString), string_(std::move(s)) {}
  Value(absl::string_view s) : type_(Type::kString), string_(s.data(), s.size()) {}
  Value(Array a) : type_(Type::kArray), array_(std::move(a)) {}
  Value(Object o) : type_(Type::kObject), object_(std::move(o)) {}

  static Value MakeArray() { return Value(Array{}); }
  static Value MakeObject() { return Value(Object{}); }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  // True for numbers written as an integer literal (no '.', no exponent) that
  // fit in int64, and for values built from a C++ integer.
  bool is_int() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors. Calling one for the wrong type throws psync::InternalError
  // (a programming error: check the type first, or use Find / the Get* helpers).
  bool bool_value() const;
  double number() const;    // any number
  int64_t int_value() const;  // requires is_int()
  const std::string& string_value() const;
  const Array& array() const;
  Array& array();
  const Object& object() const;
  Object& object();

  // Object helpers. Find returns nullptr when this is not an object or the key
  // is absent. Set requires an object and returns *this for chaining.
  const Value* Find(absl::string_view key) const;
  Value& Set(std::string key, Value value);
  // Array helper: requires an array; returns *this for chaining.
  Value& Append(Value value);

  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  void Expect(Type t) const;
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  Array array_;
  Object object_;
};

inline size_t Object::size() const { return members_.size(); }
inline bool Object::empty() const { return members_.empty(); }
inline Object::const_iterator Object::begin() const { return members_.begin(); }
inline Object::const_iterator Object::end() const { return members_.end(); }
inline Object::iterator Object::begin() { return members_.begin(); }
inline Object::iterator Object::end() { return members_.end(); }

struct ParseOptions {
  // Arrays/objects nested deeper than this are rejected (the parser recurses,
  // so this bounds stack use on hostile input).
  int max_depth = 64;
  // Inputs longer than this are rejected before parsing.
  size_t max_size = 256u << 20;  // 256 MiB
};

// Parses exactly one JSON value (surrounded by optional whitespace).
// Errors are InvalidArgument: "JSON error at byte 17: expected ':' after object key".
absl::StatusOr<Value> Parse(absl::string_view text, const ParseOptions& options = {});

// Writes `value` as JSON. Compact by default; pretty = 2-space indentation.
// Strings are written as UTF-8 with '"', '\\' and control characters escaped.
// Non-finite doubles (NaN, +-Inf) have no JSON form and are written as null.
std::string Serialize(const Value& value, bool pretty = false);

// `s` as a quoted, escaped JSON string literal.
std::string Quote(absl::string_view s);

}  // namespace json
}  // namespace psync
