// The checked-field layer every JSON format reads through: each accessor's checks, and what its
// messages name (the field with its path, the value, what was expected).

#include "poolrun/common/json_fields.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace poolrun::common {
namespace {

using nlohmann::json;

// A format that throws std::invalid_argument with a prefix of its own.
struct Failed : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

JsonFields::Failure throwing() {
  return [](const std::string& message) { throw Failed("doc.json: " + message); };
}

template <typename F>
std::string messageOf(F&& f) {
  try {
    f();
  } catch (const Failed& e) {
    return e.what();
  }
  return "(accepted)";
}

const json kDoc = json::parse(R"({
  "gpus": 8, "big": 18446744073709551615, "neg": -3, "float": 1.5, "one": 1.0, "yes": true,
  "name": "h100", "none": null, "list": [1, 2], "obj": {"inner": {"depth": 2}},
  "items": [{"index": 4294967296}], "digits30": 123456789012345678901234567890
})");

TEST(JsonFieldsTest, ReadsEachTypeWithinItsRange) {
  JsonFields f(kDoc, "", throwing());
  EXPECT_EQ(f.integer("gpus", 1, 1000), 8);
  EXPECT_EQ(f.integer<uint64_t>("big", 0, UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(f.integer("neg", -5, 5), -3);
  EXPECT_EQ(f.integer("missing", 0, 9, 7), 7);
  EXPECT_DOUBLE_EQ(f.number("float", 0, 2), 1.5);
  EXPECT_DOUBLE_EQ(f.number("gpus", 0, 10), 8.0);  // an integer is a number
  EXPECT_TRUE(f.boolean("yes"));
  EXPECT_FALSE(f.boolean("missing", false));
  EXPECT_EQ(f.string("name"), "h100");
  EXPECT_EQ(f.string("missing", "dflt"), "dflt");
  EXPECT_EQ(f.array("list").size(), 2u);
  EXPECT_TRUE(f.optionalArray("missing").empty());
  EXPECT_EQ(f.object("obj").object("inner").integer("depth", 0, 9), 2);
}

TEST(JsonFieldsTest, MessagesNameTheFieldTheValueAndWhatWasExpected) {
  JsonFields f(kDoc, "", throwing());
  EXPECT_EQ(messageOf([&] { f.integer("gpus", 1, 4); }),
            "doc.json: field 'gpus': 8 is out of range (1 to 4)");
  EXPECT_EQ(messageOf([&] { f.integer("float", 1, 4); }),
            "doc.json: field 'float': 1.5 is not a whole number (1 to 4)");
  EXPECT_EQ(messageOf([&] { f.integer("one", 0, 4); }),
            "doc.json: field 'one': 1.0 is not a whole number (0 to 4)");
  EXPECT_EQ(messageOf([&] { f.integer("yes", 0, 4); }),
            "doc.json: field 'yes': true is not a whole number (0 to 4)");
  EXPECT_EQ(messageOf([&] { f.integer("big", -1, 1); }),
            "doc.json: field 'big': 18446744073709551615 is out of range (-1 to 1)");
  EXPECT_EQ(messageOf([&] { f.integer("digits30", 1, 4); }),
            "doc.json: field 'digits30': 1.2345678901234568e+29 is out of range (1 to 4)");
  EXPECT_EQ(messageOf([&] { f.integer<uint32_t>("neg", 0, 9); }),
            "doc.json: field 'neg': -3 is out of range (0 to 9)");
  EXPECT_EQ(messageOf([&] { f.integer("missing", 0, 4); }), "doc.json: missing field 'missing'");
  EXPECT_EQ(messageOf([&] { f.number("gpus", 0.001, 2); }),
            "doc.json: field 'gpus': 8 is out of range (0.001 to 2)");
  EXPECT_EQ(messageOf([&] { f.number("float", 2, 3); }),
            "doc.json: field 'float': 1.5 is out of range (2 to 3)");
  EXPECT_EQ(messageOf([&] { f.number("name", 2, 3); }),
            "doc.json: field 'name': \"h100\" is not a number (2 to 3)");
  EXPECT_EQ(messageOf([&] { f.boolean("name"); }), "doc.json: field 'name': \"h100\" is not true or false");
  EXPECT_EQ(messageOf([&] { f.string("gpus"); }), "doc.json: field 'gpus': 8 is not a string");
  EXPECT_EQ(messageOf([&] { f.array("name"); }), "doc.json: field 'name': \"h100\" is not a list");
  EXPECT_EQ(messageOf([&] { f.object("list"); }),
            "doc.json: field 'list': expected a JSON object, got array");
  EXPECT_EQ(messageOf([&] { JsonFields(json::array(), "", throwing()); }),
            "doc.json: expected a JSON object, got array");
}

TEST(JsonFieldsTest, NestedFieldsAreNamedByTheirPath) {
  JsonFields f(kDoc, "", throwing());
  EXPECT_EQ(messageOf([&] { f.object("obj").object("inner").integer("depth", 5, 9); }),
            "doc.json: field 'obj.inner.depth': 2 is out of range (5 to 9)");
  const json& items = f.array("items");
  JsonFields item = f.child(items[0], f.element("items", 0));
  EXPECT_EQ(messageOf([&] { item.integer("index", 0, 1023); }),
            "doc.json: field 'items[0].index': 4294967296 is out of range (0 to 1023)");
  EXPECT_EQ(messageOf([&] { item.need("gone"); }), "doc.json: missing field 'items[0].gone'");
  EXPECT_EQ(messageOf([&] { item.fail("index 9 does not exist"); }),
            "doc.json: items[0]: index 9 does not exist");
  EXPECT_EQ(messageOf([&] { f.fail("schema is wrong"); }), "doc.json: schema is wrong");
  EXPECT_EQ(messageOf([&] { item.failField("index", "must name a GPU"); }),
            "doc.json: field 'items[0].index': must name a GPU");
}

TEST(JsonFieldsTest, NullIsAbsentOrAValueAsTheFormatSays) {
  JsonFields absent(kDoc, "", throwing());
  EXPECT_FALSE(absent.has("none"));
  EXPECT_EQ(absent.integer("none", 0, 9, 4), 4);
  EXPECT_EQ(messageOf([&] { absent.string("none"); }), "doc.json: missing field 'none'");
  JsonFields values(kDoc, "", throwing(), JsonFields::Nulls::kValues);
  EXPECT_TRUE(values.has("none"));
  EXPECT_EQ(messageOf([&] { values.integer("none", 0, 9, 4); }),
            "doc.json: field 'none': null is not a whole number (0 to 9)");
}

bool commentOrExtension(std::string_view key) {
  return key == "comment" || key.starts_with("x-");
}

TEST(JsonFieldsTest, UnknownFieldsAreRefusedWithTheKnownOnes) {
  const json doc = json::parse(R"({"gpus": 1, "ttl": 5})");
  JsonFields f(doc, "", throwing());
  EXPECT_EQ(messageOf([&] {
              f.allowOnly({"gpus", "ttl_s"}, "the lease request");
            }),
            "doc.json: unknown field 'ttl' in the lease request (known: gpus, ttl_s)");
  EXPECT_EQ(messageOf([&] { f.allowOnly({"gpus", "ttl"}); }), "(accepted)");
  const json net = json::parse(R"({"net": {"sharp": false, "shrap": true, "comment": "", "x-site": 1}})");
  JsonFields n = JsonFields(net, "", throwing()).object("net");
  EXPECT_EQ(messageOf([&] { n.allowOnly({"sharp"}, {}, commentOrExtension); }),
            "doc.json: unknown field 'net.shrap' (known: sharp)");
  // A key that would break the message's line is shown with JSON's escapes.
  const json odd = json::parse(R"({"a\nb'": 1})");
  EXPECT_EQ(messageOf([&] { JsonFields(odd, "", throwing()).allowOnly({"gpus"}, "the node"); }),
            "doc.json: unknown field 'a\\nb'' in the node (known: gpus)");
  EXPECT_EQ(messageOf([&] { JsonFields(odd, "", throwing()).allowOnly({"gpus"}, "the node"); }).find('\n'),
            std::string::npos);
}

TEST(JsonFieldsTest, ShownValuesAreCutShortAndPrintable) {
  EXPECT_EQ(shownJson(json(std::string(100, 'a'))), "\"" + std::string(39, 'a') + "...");
  EXPECT_EQ(shownJson(json(std::string("\xff"))), "\"\xef\xbf\xbd\"");  // not UTF-8: replaced
  EXPECT_EQ(shownJson(json::parse("[1,2]")), "[1,2]");
}

}  // namespace
}  // namespace poolrun::common
