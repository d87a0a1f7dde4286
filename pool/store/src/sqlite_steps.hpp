#pragma once

// What the SQLite store's files share (store.cpp, store_jobs.cpp): a column as text, a statement
// bound and stepped, and the refusal of a damaged file. Private to the store.

#include <sqlite3.h>

#include <filesystem>
#include <string>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/store.hpp"

namespace poolrun::pool::sql {

inline std::string text(sqlite3_stmt* st, int col) {
  const unsigned char* p = sqlite3_column_text(st, col);
  return p ? reinterpret_cast<const char*>(p) : "";
}

// Binds and steps one statement to completion, then resets it.
class Step {
 public:
  explicit Step(sqlite3* db, sqlite3_stmt* st) : db_(db), st_(st) {}
  ~Step() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  Step& bind(const std::string& v) {
    sqlite3_bind_text(st_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Step& bind(int64_t v) {
    sqlite3_bind_int64(st_, ++n_, v);
    return *this;
  }
  Step& bindReal(double v) {
    sqlite3_bind_double(st_, ++n_, v);
    return *this;
  }
  Step& bindNull() {
    sqlite3_bind_null(st_, ++n_);
    return *this;
  }
  bool row() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(ErrorCode::kIo,
                std::string("pool state: ") + sqlite3_errmsg(db_) + " (" + sqlite3_sql(st_) + ")");
  }
  void run() {
    while (row()) {
    }
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_;
  int n_ = 0;
};

// What a refusal says to do: the file is either restored (and its record, which counts commits a
// backup lacks, deleted) or moved away with everything beside it. `it` names the file.
inline std::string restoreOrMove(const std::filesystem::path& file, const std::string& it) {
  std::string f = file.string(), g = Store::generationFile(file).string();
  return "restore " + it + " from a backup (with its -wal, then delete " + g +
         ", which counts commits the backup does not have), or move " + it + ", with " + f + "-wal, " + f +
         "-shm and " + g + ", away to start an empty pool";
}

inline Error refusal(const std::filesystem::path& file, const std::string& found) {
  return Error(ErrorCode::kIo,
               file.string() + ": " + found + "; nothing was written to it: " + restoreOrMove(file, "it"));
}

}  // namespace poolrun::pool::sql
