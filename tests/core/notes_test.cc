// octet explains its decisions in named notes: a comment "NOTE [name]:" (or
// "NOTE [name]" alone on its line) where the code it explains lives, and
// pointers to it from elsewhere, "NOTE [name]", often with the file that
// holds it ("NOTE [name] in ops/cpu/dnnl_gemm.cc", "(NOTE [name] in
// `octet/core/env.h`)"). When code moves between files those pointers go
// stale without a compiler noticing. This test reads the sources, tests,
// examples, benchmarks, tools, scripts, the README and docs/ (the text under
// OCTET_SOURCE_DIR; no build of them needed) and fails, naming the file and
// the line, when
//   - a "NOTE [name]" mention has no definition anywhere;
//   - a note is pointed to "in" a file (or "(file)" right after it) that
//     does not define it, or that does not exist.
// A note's text may go on where it applies ("// NOTE [name]: this test
// checks ..."), so a name can start such comments in several files; any of
// them answers a pointer. A name may wrap over comment lines: each run of
// comment lines (or a markdown paragraph) is read as one text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace octet {
namespace {

namespace fs = std::filesystem;

// One run of comment lines (or a markdown paragraph) joined by spaces, with
// where each of its lines starts and ends in the joined text.
struct Passage {
  std::string file;       // relative to the source root
  int first_line = 0;     // 1-based
  std::string text;
  std::vector<size_t> line_starts, line_ends;
  std::vector<int> line_numbers;
};

bool HasExtension(const fs::path& p, std::initializer_list<const char*> exts) {
  for (const char* e : exts)
    if (p.extension() == e) return true;
  return false;
}

std::vector<std::string> SourceFiles(const fs::path& root) {
  std::vector<std::string> files;
  for (const char* dir : {"octet", "tests", "examples", "benchmarks", "tools", "scripts", "docs", ".ci"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      if (!e.is_regular_file()) continue;
      if (!HasExtension(e.path(), {".h", ".cc", ".cu", ".cuh", ".sh", ".md", ".txt", ".cmake"}) &&
          e.path().filename() != "run")
        continue;
      files.push_back(fs::relative(e.path(), root).generic_string());
    }
  }
  for (const char* top : {"README.md", "CMakeLists.txt"})
    if (fs::exists(root / top)) files.push_back(top);
  return files;
}

// The comment text of a line (after "//" or "#", or the whole line for
// markdown), or nullopt when the line carries none.
std::optional<std::string> CommentOf(const std::string& line, bool markdown, bool hash_comments) {
  if (markdown) {
    if (line.find_first_not_of(" \t") == std::string::npos) return std::nullopt;
    return line;
  }
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string::npos) return std::nullopt;
  std::string_view rest(line);
  rest.remove_prefix(start);
  if (hash_comments) {
    if (rest.substr(0, 1) != "#") return std::nullopt;
    rest.remove_prefix(1);
  } else {
    const size_t at = line.find("//");
    if (at == std::string::npos) return std::nullopt;
    rest = std::string_view(line).substr(at + 2);
  }
  const size_t text = rest.find_first_not_of(" \t");
  return text == std::string_view::npos ? std::string() : std::string(rest.substr(text));
}

std::vector<Passage> PassagesOf(const fs::path& root, const std::string& file) {
  std::ifstream in(root / file);
  const bool markdown = HasExtension(fs::path(file), {".md"});
  const bool hash = HasExtension(fs::path(file), {".sh", ".txt", ".cmake"}) || fs::path(file).filename() == "run";
  std::vector<Passage> out;
  Passage cur;
  auto flush = [&] {
    if (!cur.text.empty()) out.push_back(cur);
    cur = Passage{};
  };
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::optional<std::string> c = CommentOf(line, markdown, hash);
    if (!c) {
      flush();
      continue;
    }
    if (cur.text.empty()) {
      cur.file = file;
      cur.first_line = number;
    } else {
      cur.text += ' ';
    }
    cur.line_starts.push_back(cur.text.size());
    cur.text += *c;
    cur.line_ends.push_back(cur.text.size());
    cur.line_numbers.push_back(number);
  }
  flush();
  return out;
}

int LineAt(const Passage& p, size_t offset) {
  for (size_t i = p.line_starts.size(); i-- > 0;)
    if (p.line_starts[i] <= offset) return p.line_numbers[i];
  return p.first_line;
}

std::string Where(const Passage& p, size_t offset) { return p.file + ":" + std::to_string(LineAt(p, offset)); }

// A name as one line: runs of spaces (a markdown list item's wrapped line
// keeps its indentation) become one.
std::string Squeezed(const std::string& name) {
  std::string out;
  for (char c : name)
    if (c != ' ' || out.empty() || out.back() != ' ') out += c;
  return out;
}

struct Notes {
  std::map<std::string, std::vector<std::string>> defined;  // name -> "file:line" of each definition
  std::map<std::string, std::set<std::string>> files;       // name -> files defining it
  std::vector<std::string> problems;
};

// The files whose path is `named` or ends with "/named".
std::vector<std::string> FilesNamed(const std::vector<std::string>& all, const std::string& named) {
  std::vector<std::string> out;
  for (const std::string& f : all)
    if (f == named || (f.size() > named.size() && f.compare(f.size() - named.size(), named.size(), named) == 0 &&
                       f[f.size() - named.size() - 1] == '/'))
      out.push_back(f);
  return out;
}

Notes ReadNotes(const fs::path& root) {
  const std::vector<std::string> files = SourceFiles(root);
  std::vector<Passage> passages;
  for (const std::string& f : files) {
    if (f == "tests/core/notes_test.cc") continue;  // it spells the syntax out
    std::vector<Passage> p = PassagesOf(root, f);
    passages.insert(passages.end(), p.begin(), p.end());
  }
  Notes notes;
  const std::regex mention(R"(NOTE \[([^\[\]]+)\])");
  // Definitions: at the start of a comment line of code (not markdown), then
  // ":" or the end of that line.
  for (const Passage& p : passages) {
    if (HasExtension(fs::path(p.file), {".md"})) continue;
    for (auto it = std::sregex_iterator(p.text.begin(), p.text.end(), mention); it != std::sregex_iterator(); ++it) {
      const size_t at = static_cast<size_t>(it->position(0)), end = at + static_cast<size_t>(it->length(0));
      // Followed by ':', or the whole of a line.
      bool definition = end < p.text.size() && p.text[end] == ':';
      for (size_t i = 0; i < p.line_starts.size(); ++i)
        definition = definition || (p.line_starts[i] == at && p.line_ends[i] == end);
      if (definition) {
        const std::string name = Squeezed((*it)[1]);
        notes.defined[name].push_back(Where(p, at));
        notes.files[name].insert(p.file);
      }
    }
  }
  // Pointers: "NOTE [name]" anywhere; "[name] in FILE" / "[name] (FILE" /
  // "[name] (FILE)" name the file that must define it.
  const std::regex in_file(
      R"(\[([^\[\]]+)\],? (?:in|\(see|\(in|\()?\s?`?((?:[\w.-]+/)*[\w.-]+\.(?:cuh|cu|cc|h|sh))(?![\w.]))");
  for (const Passage& p : passages) {
    for (auto it = std::sregex_iterator(p.text.begin(), p.text.end(), mention); it != std::sregex_iterator(); ++it) {
      const std::string name = Squeezed((*it)[1]);
      if (!notes.defined.count(name))
        notes.problems.push_back(Where(p, static_cast<size_t>(it->position(0))) + ": NOTE [" + name +
                                 "] is defined nowhere");
    }
    for (auto it = std::sregex_iterator(p.text.begin(), p.text.end(), in_file); it != std::sregex_iterator(); ++it) {
      const std::string name = Squeezed((*it)[1]), file = (*it)[2];
      if (!notes.defined.count(name)) continue;  // not a note (or reported above)
      const std::vector<std::string> candidates = FilesNamed(files, file);
      const std::string where = Where(p, static_cast<size_t>(it->position(0)));
      if (candidates.empty()) {
        notes.problems.push_back(where + ": NOTE [" + name + "] is pointed to in " + file + ", which does not exist");
        continue;
      }
      bool found = false;
      for (const std::string& c : candidates) found = found || notes.files[name].count(c) > 0;
      if (!found) {
        std::string actual;
        for (const std::string& f : notes.files[name]) actual += (actual.empty() ? "" : ", ") + f;
        notes.problems.push_back(where + ": NOTE [" + name + "] is pointed to in " + file + " but defined in " +
                                 actual);
      }
    }
  }
  return notes;
}

TEST(Notes, EveryPointerFindsItsNote) {
  const Notes notes = ReadNotes(OCTET_SOURCE_DIR);
  EXPECT_GT(notes.defined.size(), 100u) << "the sources were not found under " << OCTET_SOURCE_DIR;
  std::string all;
  for (const std::string& p : notes.problems) all += p + "\n";
  EXPECT_TRUE(notes.problems.empty()) << notes.problems.size() << " problem(s):\n" << all;
}

}  // namespace
}  // namespace octet
