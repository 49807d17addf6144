#include "common/json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace psync {
namespace json {

// ---------------------------------------------------------------- Object

Object::Object(std::initializer_list<Member> members) {
  for (const Member& m : members) Set(m.first, m.second);
}

const Value* Object::Find(absl::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &members_[it->second].second;
}

Value* Object::Find(absl::string_view key) {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &members_[it->second].second;
}

void Object::Set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    members_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, members_.size());
  members_.emplace_back(std::move(key), std::move(value));
}

bool Object::Insert(std::string key, Value value) {
  if (index_.count(key)) return false;
  index_.emplace(key, members_.size());
  members_.emplace_back(std::move(key), std::move(value));
  return true;
}

bool Object::Erase(absl::string_view key) {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(it->second));
  Reindex();
  return true;
}

void Object::Reindex() {
  index_.clear();
  for (size_t i = 0; i < members_.size(); ++i) index_.emplace(members_[i].first, i);
}

bool Object::operator==(const Object& other) const { return members_ == other.members_; }

// ---------------------------------------------------------------- Value

const char* TypeName(Type type) {
  switch (type) {
    case Type::kNull: return "null";
    case Type::kBool: return "bool";
    case Type::kNumber: return "number";
    case Type::kString: return "string";
    case Type::kArray: return "array";
    case Type::kObject: return "object";
  }
  return "?";
}

void Value::Expect(Type t) const {
  PSYNC_CHECK(type_ == t) << "json::Value is a " << TypeName(type_) << ", not a " << TypeName(t);
}

bool Value::bool_value() const { Expect(Type::kBool); return bool_; }
double Value::number() const { Expect(Type::kNumber); return double_; }
int64_t Value::int_value() const {
  Expect(Type::kNumber);
  PSYNC_CHECK(is_int_) << "json number " << double_ << " is not an exact integer";
  return int_;
}
const std::string& Value::string_value() const { Expect(Type::kString); return string_; }
const Array& Value::array() const { Expect(Type::kArray); return array_; }
Array& Value::array() { Expect(Type::kArray); return array_; }
const Object& Value::object() const { Expect(Type::kObject); return object_; }
Object& Value::object() { Expect(Type::kObject); return object_; }

const Value* Value::Find(absl::string_view key) const {
  return type_ == Type::kObject ? object_.Find(key) : nullptr;
}

Value& Value::Set(std::string key, Value value) {
  Expect(Type::kObject);
  object_.Set(std::move(key), std::move(value));
  return *this;
}

Value& Value::Append(Value value) {
  Expect(Type::kArray);
  array_.push_back(std::move(value));
  return *this;
}

bool Value::operator==(const Value& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kNull: return true;
    case Type::kBool: return bool_ == other.bool_;
    case Type::kNumber:
      if (is_int_ && other.is_int_) return int_ == other.int_;
      return double_ == other.double_;
    case Type::kString: return string_ == other.string_;
    case Type::kArray: return array_ == other.array_;
    case Type::kObject: return object_ == other.object_;
  }
  return false;
}

// ---------------------------------------------------------------- parser

namespace {

class Parser {
 public:
  Parser(absl::string_view text, const ParseOptions& options) : s_(text), opt_(options) {}

  absl::StatusOr<Value> Run() {
    if (s_.size() > opt_.max_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "JSON input is %d bytes, over the limit of %d bytes", s_.size(), opt_.max_size));
    }
    SkipWs();
    if (pos_ == s_.size()) return Error("empty input (expected a JSON value)");
    Value v;
    absl::Status st = ParseValue(&v, 0);
    if (!st.ok()) return st;
    SkipWs();
    if (pos_ != s_.size()) return Error(absl::StrCat("trailing data after the JSON value: ", Found()));
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }
  absl::Status ErrorAt(size_t pos, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON error at byte ", pos, ": ", what));
  }

  // Describes the byte at pos_ for error messages.
  std::string Found() const {
    if (pos_ >= s_.size()) return "unexpected end of input";
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7f) return absl::StrFormat("found '%c'", c);
    return absl::StrFormat("found byte 0x%02x", c);
  }

  void SkipWs() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool Consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::Status ParseValue(Value* out, int depth) {
    if (pos_ >= s_.size()) return Error("unexpected end of input (expected a value)");
    char c = s_[pos_];
    switch (c) {
      case '{': return ParseObject(out, depth + 1);
      case '[': return ParseArray(out, depth + 1);
      case '"': {
        std::string str;
        absl::Status st = ParseString(&str);
        if (!st.ok()) return st;
        *out = Value(std::move(str));
        return absl::OkStatus();
      }
      case 't': return ParseLiteral("true", Value(true), out);
      case 'f': return ParseLiteral("false", Value(false), out);
      case 'n': return ParseLiteral("null", Value(), out);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
        return Error(absl::StrCat("expected a value, ", Found()));
    }
  }

  absl::Status ParseLiteral(absl::string_view word, Value v, Value* out) {
    if (s_.substr(pos_, word.size()) != word) {
      return Error(absl::StrCat("invalid literal (expected '", word, "')"));
    }
    pos_ += word.size();
    *out = std::move(v);
    return absl::OkStatus();
  }

  absl::Status CheckDepth(int depth) const {
    if (depth > opt_.max_depth) {
      return Error(absl::StrCat("nesting deeper than the limit of ", opt_.max_depth));
    }
    return absl::OkStatus();
  }

  absl::Status ParseObject(Value* out, int depth) {
    absl::Status st = CheckDepth(depth);
    if (!st.ok()) return st;
    ++pos_;  // '{'
    Object obj;
    SkipWs();
    if (Consume('}')) {
      *out = Value(std::move(obj));
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      if (pos_ >= s_.size() || s_[pos_] != '"') {
        return Error(absl::StrCat("expected a string key in object, ", Found()));
      }
      size_t key_pos = pos_;
      std::string key;
      st = ParseString(&key);
      if (!st.ok()) return st;
      SkipWs();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after object key, ", Found()));
      SkipWs();
      Value v;
      st = ParseValue(&v, depth);
      if (!st.ok()) return st;
      if (obj.Find(key) != nullptr) {
        return ErrorAt(key_pos, absl::StrCat("duplicate object key ", Quote(key)));
      }
      obj.Insert(std::move(key), std::move(v));
      SkipWs();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error(absl::StrCat("expected ',' or '}' in object, ", Found()));
    }
    *out = Value(std::move(obj));
    return absl::OkStatus();
  }

  absl::Status ParseArray(Value* out, int depth) {
    absl::Status st = CheckDepth(depth);
    if (!st.ok()) return st;
    ++pos_;  // '['
    Array arr;
    SkipWs();
    if (Consume(']')) {
      *out = Value(std::move(arr));
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      Value v;
      st = ParseValue(&v, depth);
      if (!st.ok()) return st;
      arr.push_back(std::move(v));
      SkipWs();
      if (Consume(',')) continue;
      if (Consume(']')) break;
      return Error(absl::StrCat("expected ',' or ']' in array, ", Found()));
    }
    *out = Value(std::move(arr));
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Reads 4 hex digits at pos_ (after "\u").
  absl::Status ParseHex4(uint32_t* cp) {
    if (s_.size() - pos_ < 4) return Error("truncated \\u escape (expected 4 hex digits)");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return ErrorAt(pos_ + i, "invalid hex digit in \\u escape");
    }
    pos_ += 4;
    *cp = v;
    return absl::OkStatus();
  }

  // Validates one raw UTF-8 sequence starting at pos_ (first byte >= 0x80)
  // and appends it. Rejects overlong forms, surrogates and > U+10FFFF.
  absl::Status CopyUtf8(std::string* out) {
    const size_t start = pos_;
    unsigned char b0 = static_cast<unsigned char>(s_[pos_]);
    int len;
    uint32_t cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) { len = 2; cp = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) { len = 3; cp = b0 & 0x0F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { len = 4; cp = b0 & 0x07; }
    else return Error(absl::StrFormat("invalid UTF-8 lead byte 0x%02x in string", b0));
    if (s_.size() - pos_ < static_cast<size_t>(len)) return Error("truncated UTF-8 sequence in string");
    for (int i = 1; i < len; ++i) {
      unsigned char b = static_cast<unsigned char>(s_[pos_ + i]);
      if ((b & 0xC0) != 0x80) {
        return ErrorAt(pos_ + i, absl::StrFormat("invalid UTF-8 continuation byte 0x%02x in string", b));
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return Error("overlong UTF-8 sequence in string");
    if (cp >= 0xD800 && cp <= 0xDFFF) return Error("UTF-8 encoded surrogate in string");
    if (cp > 0x10FFFF) return Error("UTF-8 code point above U+10FFFF in string");
    out->append(s_.data() + start, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    const size_t open = pos_;
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= s_.size()) return ErrorAt(open, "unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) {
        return Error(absl::StrFormat("unescaped control character 0x%02x in string", c));
      }
      if (c >= 0x80) {
        absl::Status st = CopyUtf8(out);
        if (!st.ok()) return st;
        continue;
      }
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      const size_t esc = pos_;
      ++pos_;
      if (pos_ >= s_.size()) return ErrorAt(open, "unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          absl::Status st = ParseHex4(&cp);
          if (!st.ok()) return st;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return ErrorAt(esc, "lone low surrogate in \\u escape (invalid UTF-16)");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            // A high surrogate must be followed by "\u" + a low surrogate.
            if (s_.substr(pos_, 2) != "\\u") {
              return ErrorAt(esc, "high surrogate in \\u escape not followed by a low surrogate");
            }
            pos_ += 2;
            uint32_t lo = 0;
            st = ParseHex4(&lo);
            if (!st.ok()) return st;
            if (lo < 0xDC00 || lo > 0xDFFF) {
              return ErrorAt(esc, "high surrogate in \\u escape not followed by a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return ErrorAt(esc, absl::StrFormat("invalid escape '\\%c' in string",
                                              (e >= 0x20 && e < 0x7f) ? e : '?'));
      }
    }
  }

  absl::Status ParseNumber(Value* out) {
    const size_t start = pos_;
    bool integral = true;
    Consume('-');
    if (pos_ >= s_.size()) return Error("invalid number: expected a digit after '-'");
    if (s_[pos_] == '0') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        return Error("invalid number: leading zeros are not allowed");
      }
    } else if (s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    } else {
      return Error(absl::StrCat("invalid number: expected a digit, ", Found()));
    }
    if (Consume('.')) {
      integral = false;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') {
        return Error("invalid number: expected a digit after '.'");
      }
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (!Consume('+')) Consume('-');
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') {
        return Error("invalid number: expected a digit in the exponent");
      }
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc() && r.ptr == last) {
        *out = Value(i);
        return absl::OkStatus();
      }
      // Too big for int64: fall through and keep it as a double.
    }
    double d = 0;
    auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) {
      // from_chars also reports underflow (1e-400) as out of range; JSON
      // allows it and the nearest double is 0, so only reject overflow.
      bool tiny = false;
      for (const char* p = first; p < last; ++p) {
        if (*p == 'e' || *p == 'E') tiny = p + 1 < last && p[1] == '-';
      }
      if (!tiny) return ErrorAt(start, "number out of range for a double");
      d = (*first == '-') ? -0.0 : 0.0;
    } else if (r.ec != std::errc() || r.ptr != last) {
      return ErrorAt(start, "invalid number");
    }
    *out = Value(d);
    return absl::OkStatus();
  }

  absl::string_view s_;
  const ParseOptions& opt_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------- writer

void AppendQuoted(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out->append(absl::StrFormat("\\u%04x", c));
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

void AppendNumber(const Value& v, std::string* out) {
  char buf[64];
  if (v.is_int()) {
    auto r = std::to_chars(buf, buf + sizeof(buf), v.int_value());
    out->append(buf, r.ptr);
    return;
  }
  double d = v.number();
  if (!std::isfinite(d)) {
    out->append("null");
    return;
  }
  // Shortest representation that reads back to the same double.
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  out->append(buf, r.ptr);
}

void Newline(bool pretty, int indent, std::string* out) {
  if (!pretty) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(indent) * 2, ' ');
}

void Write(const Value& v, bool pretty, int indent, std::string* out) {
  switch (v.type()) {
    case Type::kNull: out->append("null"); return;
    case Type::kBool: out->append(v.bool_value() ? "true" : "false"); return;
    case Type::kNumber: AppendNumber(v, out); return;
    case Type::kString: AppendQuoted(v.string_value(), out); return;
    case Type::kArray: {
      const Array& a = v.array();
      out->push_back('[');
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out->push_back(',');
        Newline(pretty, indent + 1, out);
        Write(a[i], pretty, indent + 1, out);
      }
      if (!a.empty()) Newline(pretty, indent, out);
      out->push_back(']');
      return;
    }
    case Type::kObject: {
      const Object& o = v.object();
      out->push_back('{');
      bool first = true;
      for (const auto& [key, val] : o) {
        if (!first) out->push_back(',');
        first = false;
        Newline(pretty, indent + 1, out);
        AppendQuoted(key, out);
        out->append(pretty ? ": " : ":");
        Write(val, pretty, indent + 1, out);
      }
      if (!o.empty()) Newline(pretty, indent, out);
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

absl::StatusOr<Value> Parse(absl::string_view text, const ParseOptions& options) {
  return Parser(text, options).Run();
}

std::string Serialize(const Value& value, bool pretty) {
  std::string out;
  Write(value, pretty, 0, &out);
  return out;
}

std::string Quote(absl::string_view s) {
  std::string out;
  AppendQuoted(s, &out);
  return out;
}

}  // namespace json
}  // namespace psync
