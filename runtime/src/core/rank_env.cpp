#include "rank_env.hpp"

namespace poolrun::runtime::core {
namespace {

constexpr long kMaxIndex = 0x7fffffff;

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// A cursor over one JSON value. Every read either succeeds and moves past what it read, or fails
// and leaves `failed` set; a failed reader fails every later read, so callers check once.
class Reader {
 public:
  Reader(Text text, char* scratch) : text_(text), scratch_(scratch) {}

  bool failed() const { return failed_; }
  bool atEnd() {
    skipSpace();
    return pos_ == text_.size;
  }
  char peek() {
    skipSpace();
    return pos_ < text_.size ? text_[pos_] : '\0';
  }
  bool take(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!take(c)) failed_ = true;
  }

  // Members of an object or elements of an array: call after '{' or '[', then once per item.
  bool next(char close, bool& first) {
    if (failed_) return false;
    if (take(close)) return false;
    if (!first) expect(',');
    first = false;
    return !failed_;
  }

  // A string, decoded into scratch (stays valid until the reader is gone).
  Text string() {
    if (!take('"')) return fail();
    char* out = scratch_ + used_;
    size_t n = 0;
    while (pos_ < text_.size && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) return fail();
      if (c != '\\') {
        out[n++] = c;
        continue;
      }
      if (pos_ >= text_.size) return fail();
      char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out[n++] = e;
          break;
        case 'b':
          out[n++] = '\b';
          break;
        case 'f':
          out[n++] = '\f';
          break;
        case 'n':
          out[n++] = '\n';
          break;
        case 'r':
          out[n++] = '\r';
          break;
        case 't':
          out[n++] = '\t';
          break;
        case 'u': {
          unsigned long cp = 0;
          if (!hex4(cp)) return fail();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            unsigned long low = 0;
            if (pos_ + 2 > text_.size || text_[pos_] != '\\' || text_[pos_ + 1] != 'u') return fail();
            pos_ += 2;
            if (!hex4(low) || low < 0xDC00 || low >= 0xE000) return fail();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return fail();
          }
          n += utf8(cp, out + n);
          break;
        }
        default:
          return fail();
      }
    }
    if (!take('"')) return fail();
    used_ += n;
    return {out, n};
  }

  // An integer (no fraction, no exponent) in 0..kMaxIndex; false for any other number or value.
  bool index(long& out) {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ == start || (text_[start] == '0' && pos_ - start > 1) ||
        !parseNumber(text_.sub(start, pos_ - start), kMaxIndex, out)) {
      pos_ = start;
      return false;
    }
    if (pos_ < text_.size && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      pos_ = start;
      return false;
    }
    return true;
  }

  // Any JSON value, checked and passed over.
  void skip(int depth = 0) {
    if (failed_ || depth > 64) {
      failed_ = true;
      return;
    }
    char c = peek();
    bool first = true;
    if (c == '{') {
      ++pos_;
      while (next('}', first)) {
        string();
        expect(':');
        skip(depth + 1);
      }
    } else if (c == '[') {
      ++pos_;
      while (next(']', first)) skip(depth + 1);
    } else if (c == '"') {
      size_t mark = used_;
      string();
      used_ = mark;  // nothing keeps a skipped string
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      number();
    } else if (!word("true") && !word("false") && !word("null")) {
      failed_ = true;
    }
  }

  // The text of the value at the cursor, checked and passed over: to come back to later.
  Text raw() {
    skipSpace();
    size_t start = pos_;
    skip();
    return text_.sub(start, pos_ - start);
  }

 private:
  void skipSpace() {
    while (pos_ < text_.size && space(text_[pos_])) ++pos_;
  }
  Text fail() {
    failed_ = true;
    return {};
  }
  bool word(Text w) {
    if (!text_.sub(pos_).startsWith(w)) return false;
    pos_ += w.size;
    return true;
  }
  void number() {
    take('-');
    size_t start = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < text_.size && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (!digits() || (text_[start] == '0' && pos_ - start > 1)) failed_ = true;
    if (pos_ < text_.size && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) failed_ = true;
    }
    if (pos_ < text_.size && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) failed_ = true;
    }
  }
  bool hex4(unsigned long& out) {
    if (pos_ + 4 > text_.size) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      unsigned long d = c >= '0' && c <= '9'   ? static_cast<unsigned long>(c - '0')
                        : c >= 'a' && c <= 'f' ? static_cast<unsigned long>(c - 'a' + 10)
                        : c >= 'A' && c <= 'F' ? static_cast<unsigned long>(c - 'A' + 10)
                                               : 16;
      if (d == 16) return false;
      out = out * 16 + d;
    }
    return true;
  }
  static size_t utf8(unsigned long cp, char* out) {
    auto byte = [](unsigned long v) { return static_cast<char>(static_cast<unsigned char>(v)); };
    if (cp < 0x80) {
      out[0] = byte(cp);
      return 1;
    }
    if (cp < 0x800) {
      out[0] = byte(0xC0 | (cp >> 6));
      out[1] = byte(0x80 | (cp & 0x3F));
      return 2;
    }
    if (cp < 0x10000) {
      out[0] = byte(0xE0 | (cp >> 12));
      out[1] = byte(0x80 | ((cp >> 6) & 0x3F));
      out[2] = byte(0x80 | (cp & 0x3F));
      return 3;
    }
    out[0] = byte(0xF0 | (cp >> 18));
    out[1] = byte(0x80 | ((cp >> 12) & 0x3F));
    out[2] = byte(0x80 | ((cp >> 6) & 0x3F));
    out[3] = byte(0x80 | (cp & 0x3F));
    return 4;
  }

  Text text_;
  char* scratch_;
  size_t pos_ = 0;
  size_t used_ = 0;
  bool failed_ = false;
};

// The `i`-th element of the array `array` (raw text), or an unset Text.
Text element(Text array, long i, char* scratch) {
  Reader r(array, scratch);
  if (!r.take('[')) return {};
  bool first = true;
  for (long k = 0; r.next(']', first); ++k) {
    Text value = r.raw();
    if (k == i) return r.failed() ? Text() : value;
  }
  return {};
}

bool bad(Line& error, Text what) {
  error.clear();
  error.add("POOLRUN_RANK_ENV: ").add(what).add(" (it is written by poolrun; run the job with poolrun)");
  return false;
}

}  // namespace

bool rankVariables(Text doc, int rank, char* scratch, VariableSink& sink, Line& error) {
  // The whole document is checked first; the parts are then read from their raw text.
  Reader top(doc, scratch);
  Text schema, sets, templates, runs;
  bool object = top.take('{');
  bool first = true;
  while (object && top.next('}', first)) {
    Text key = top.string();
    top.expect(':');
    if (key == "schema" && top.peek() == '"') {
      schema = top.string();
    } else {
      Text value = top.raw();
      if (key == "sets") sets = value;
      if (key == "templates") templates = value;
      if (key == "runs") runs = value;
    }
  }
  if (!object || top.failed() || !top.atEnd()) return bad(error, "not a JSON object");
  if (!(schema == "poolrun.rank-env/1")) return bad(error, "schema is not poolrun.rank-env/1");
  if (!sets.startsWith("[") || !templates.startsWith("[") || !runs.startsWith("["))
    return bad(error, "sets, templates and runs must be arrays");

  Reader rr(runs, scratch);
  rr.take('[');
  bool firstRun = true;
  while (rr.next(']', firstRun)) {
    long run[4] = {};
    bool ok = rr.take('[');
    bool firstField = true;
    int fields = 0;
    while (ok && rr.next(']', firstField)) {
      if (fields == 4 || !rr.index(run[fields])) ok = false;
      ++fields;
    }
    if (!ok || rr.failed() || fields != 4)
      return bad(error, "each run must be [first_rank, nodes, ranks_per_node, template]");
    long firstRank = run[0], nodes = run[1], perNode = run[2], tpl = run[3];
    if (rank < firstRank || rank >= firstRank + nodes * perNode) continue;
    Text t = element(templates, tpl, scratch);
    if (perNode == 0 || !t.isSet()) return bad(error, "run names a missing template");
    long local = (rank - firstRank) % perNode;
    Reader tr(element(t, local, scratch), scratch);
    long setIndex = -1;
    Text set;
    if (!tr.index(setIndex) || !(set = element(sets, setIndex, scratch)).isSet()) {
      Line what;
      what.add("template ").add(tpl).add(" has no set for local rank ").add(local);
      return bad(error, what.text());
    }
    Reader sr(set, scratch);
    if (!sr.take('{')) return bad(error, "a set must be an object of strings");
    bool firstVar = true;
    while (sr.next('}', firstVar)) {
      Text name = sr.string();
      sr.expect(':');
      Text value = sr.peek() == '"' ? sr.string() : Text();
      if (!value.isSet() || name.empty() || name.find('=') < name.size || name.find('\0') < name.size ||
          value.find('\0') < value.size) {
        Line what;
        what.add("bad variable ").quoted(name);
        return bad(error, what.text());
      }
      if (!sink.set(name, value)) return bad(error, "too many variables for this rank");
    }
    return true;
  }
  Line what;
  what.add("no entry for rank ").add(rank);
  return bad(error, what.text());
}

}  // namespace poolrun::runtime::core
