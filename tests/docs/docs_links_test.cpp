// The documentation's links: every relative link in README.md, docs/ and the part READMEs points at
// a file of the repository, and every #anchor at a heading of the page it names, so that a reader
// who follows one lands somewhere. Links into ../shared or elsewhere outside the repository are
// refused: users do not have those files.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

struct Link {
  std::string target;  // as written: "pool.md#names", "../runtime/README.md", "#exit-status"
  int line = 0;
};

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool isFence(std::string_view line) {
  size_t i = line.find_first_not_of(' ');
  return i != std::string_view::npos && line.substr(i).starts_with("```");
}

// The text of a line without its inline code spans (`...`), which hold no links.
std::string withoutCode(std::string_view line) {
  std::string out;
  bool code = false;
  for (char c : line) {
    if (c == '`') {
      code = !code;
    } else if (!code) {
      out += c;
    }
  }
  return out;
}

// Every inline link `[text](target)` outside code blocks and code spans.
std::vector<Link> markdownLinks(std::string_view text) {
  std::vector<Link> links;
  std::istringstream in{std::string(text)};
  std::string raw;
  bool fenced = false;
  for (int number = 1; std::getline(in, raw); ++number) {
    if (isFence(raw)) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    std::string line = withoutCode(raw);
    for (size_t at = line.find("]("); at != std::string::npos; at = line.find("](", at + 2)) {
      size_t end = line.find(')', at + 2);
      if (end == std::string::npos) break;
      std::string target = line.substr(at + 2, end - at - 2);
      if (!target.empty() && target.find(' ') == std::string::npos) links.push_back({target, number});
    }
  }
  return links;
}

// GitHub's anchor of a heading: lower case, punctuation dropped (but '-' and '_'), spaces as '-';
// a repeated heading gets "-1", "-2", ...
std::set<std::string> headingAnchors(std::string_view text) {
  std::set<std::string> anchors;
  std::map<std::string, int> seen;
  std::istringstream in{std::string(text)};
  std::string line;
  bool fenced = false;
  while (std::getline(in, line)) {
    if (isFence(line)) {
      fenced = !fenced;
      continue;
    }
    size_t hashes = line.find_first_not_of('#');
    if (fenced || hashes == 0 || hashes > 6 || hashes == std::string::npos || line[hashes] != ' ') continue;
    std::string anchor;
    for (char c : line.substr(hashes + 1)) {
      auto u = static_cast<unsigned char>(c);
      if (std::isalnum(u) || c == '-' || c == '_' || u >= 0x80) {
        anchor += static_cast<char>(std::tolower(u));
      } else if (c == ' ') {
        anchor += '-';
      }
    }
    int repeat = seen[anchor]++;
    anchors.insert(repeat == 0 ? anchor : anchor + "-" + std::to_string(repeat));
  }
  return anchors;
}

bool isExternal(std::string_view target) {
  return target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:");
}

bool inside(const fs::path& file, const fs::path& root) {
  auto rel = file.lexically_normal().lexically_relative(root.lexically_normal());
  return !rel.empty() && *rel.begin() != "..";
}

// What is wrong with the links of `page` (a file under `root`), one line each, empty if nothing.
std::vector<std::string> brokenLinks(const fs::path& page, const fs::path& root) {
  std::vector<std::string> problems;
  const std::string text = slurp(page);
  const std::string name = page.lexically_relative(root).string();
  for (const Link& link : markdownLinks(text)) {
    if (isExternal(link.target)) continue;
    std::string where = name + ":" + std::to_string(link.line) + ": link '" + link.target + "'";
    size_t hash = link.target.find('#');
    std::string path = link.target.substr(0, hash);
    std::string anchor = hash == std::string::npos ? "" : link.target.substr(hash + 1);
    fs::path file = path.empty() ? page : (page.parent_path() / path).lexically_normal();
    if (!inside(file, root)) {
      problems.push_back(where + ": points outside the repository; users do not have it");
      continue;
    }
    std::error_code ec;
    if (!fs::exists(file, ec)) {
      problems.push_back(where + ": no file " + file.lexically_relative(root).string() +
                         " (fix the path or write the page)");
      continue;
    }
    if (anchor.empty()) continue;
    if (file.extension() != ".md") {
      problems.push_back(where + ": an anchor into a file that is not markdown");
      continue;
    }
    std::set<std::string> anchors = headingAnchors(file == page ? text : slurp(file));
    if (!anchors.contains(anchor)) {
      std::string known;
      for (const std::string& a : anchors) known += (known.empty() ? "" : ", ") + a;
      problems.push_back(where + ": no heading '" + anchor + "' in " +
                         file.lexically_relative(root).string() + " (its anchors: " + known + ")");
    }
  }
  return problems;
}

// README.md, docs/*.md and every part's README.md.
std::vector<fs::path> documentationPages(const fs::path& root) {
  std::vector<fs::path> pages;
  if (fs::exists(root / "README.md")) pages.push_back(root / "README.md");
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    if (entry.path().filename() == "docs") {
      for (const auto& doc : fs::directory_iterator(entry.path()))
        if (doc.path().extension() == ".md") pages.push_back(doc.path());
    } else if (fs::exists(entry.path() / "README.md")) {
      pages.push_back(entry.path() / "README.md");
    }
  }
  std::sort(pages.begin(), pages.end());
  return pages;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

// ---- the repository's own pages -----------------------------------------------------------------

TEST(DocsLinks, EveryRelativeLinkOfTheRepositoryResolves) {
  const fs::path root = fs::canonical(poolrun::test::sourceDir());
  std::vector<fs::path> pages = documentationPages(root);
  ASSERT_TRUE(std::find(pages.begin(), pages.end(), root / "docs" / "index.md") != pages.end())
      << "docs/index.md is missing under " << root;
  std::vector<std::string> problems;
  size_t links = 0;
  for (const fs::path& page : pages) {
    links += markdownLinks(slurp(page)).size();
    for (std::string& p : brokenLinks(page, root)) problems.push_back(std::move(p));
  }
  EXPECT_GT(links, 50u) << "the pages link to each other";
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(DocsLinks, EveryDocsPageIsLinkedFromTheIndex) {
  const fs::path root = fs::canonical(poolrun::test::sourceDir());
  std::set<std::string> linked;
  for (const Link& link : markdownLinks(slurp(root / "docs" / "index.md")))
    linked.insert(link.target.substr(0, link.target.find('#')));
  for (const auto& doc : fs::directory_iterator(root / "docs")) {
    std::string name = doc.path().filename().string();
    if (doc.path().extension() == ".md" && name != "index.md") {
      EXPECT_TRUE(linked.contains(name)) << "docs/index.md does not link " << name;
    }
  }
}

// ---- the checker itself, on pages written here --------------------------------------------------

class LinkChecker : public ::testing::Test {
 protected:
  poolrun::test::TempDir tmp_;
  fs::path root() const { return tmp_.path(); }
  fs::path page(const std::string& name, const std::string& text) const { return tmp_.write(name, text); }
};

TEST_F(LinkChecker, AcceptsFilesAnchorsAndExternalLinks) {
  page("docs/pool.md", "# The pool\n\n## HTTP API (poold)\n\n### Names\n");
  page("runtime/README.md", "# runtime\n\n## `libpoolrun_runtime`\n");
  fs::path index = page("docs/index.md",
                        "# Index\n\n## Exit status\n\nSee [the pool](pool.md), [names](pool.md#names), "
                        "[the API](pool.md#http-api-poold), [here](#exit-status), "
                        "[the runtime](../runtime/README.md#libpoolrun_runtime), "
                        "[Slurm](https://slurm.schedmd.com/high_throughput.html).\n");
  EXPECT_EQ(joined(brokenLinks(index, root())), "");
}

TEST_F(LinkChecker, NamesAMissingFileWithItsLine) {
  fs::path index = page("docs/index.md", "# Index\n\nline two\n[gone](gone.md)\n");
  std::vector<std::string> problems = brokenLinks(index, root());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("docs/index.md:4: link 'gone.md': no file docs/gone.md"), std::string::npos)
      << problems[0];
}

TEST_F(LinkChecker, NamesAMissingAnchorAndTheOnesThereAre) {
  page("docs/pool.md", "# The pool\n\n## Tokens\n");
  fs::path index = page("docs/index.md", "[tokens](pool.md#token)\n");
  std::vector<std::string> problems = brokenLinks(index, root());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("no heading 'token' in docs/pool.md (its anchors: the-pool, tokens)"),
            std::string::npos)
      << problems[0];
}

TEST_F(LinkChecker, RefusesLinksOutOfTheRepository) {
  fs::path index = page("docs/index.md", "[design](../../shared/DESIGN.md)\n");
  std::vector<std::string> problems = brokenLinks(index, root());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("points outside the repository"), std::string::npos) << problems[0];
}

TEST_F(LinkChecker, IgnoresCodeAndCountsRepeatedHeadings) {
  fs::path index =
      page("docs/index.md",
           "# A\n\n## Rules\n\n## Rules\n\n```\n[not a link](nowhere.md)\n## not a heading\n```\n"
           "`[nor this](nowhere.md)` [second](#rules-1)\n");
  EXPECT_EQ(joined(brokenLinks(index, root())), "");
  EXPECT_EQ(headingAnchors(slurp(index)), (std::set<std::string>{"a", "rules", "rules-1"}));
}

TEST(HeadingAnchors, FollowGithubsRules) {
  EXPECT_EQ(headingAnchors("### 2. Plan, check and write the job directory\n"),
            (std::set<std::string>{"2-plan-check-and-write-the-job-directory"}));
  EXPECT_EQ(headingAnchors("## The simulated cluster: `--pool sim:FILE`\n"),
            (std::set<std::string>{"the-simulated-cluster---pool-simfile"}));
  EXPECT_EQ(headingAnchors("## The topology JSON (`poolrun.topology/2`)\n"),
            (std::set<std::string>{"the-topology-json-poolruntopology2"}));
  EXPECT_TRUE(headingAnchors("#not a heading\n").empty());
}

}  // namespace
