// NFC per UAX #15: (1) decompose every character recursively by its canonical decomposition
// (Hangul syllables algorithmically), (2) stably sort each run of non-starters by canonical
// combining class, (3) walk left to right composing each character with the last starter when
// it is not blocked (no character in between with a class >= its own) and the pair is a
// primary composite (composition exclusions are already folded into the generated table's
// `composes` flag). Text made only of code points below U+0300 is already NFC and returned as
// is; that fast path covers ASCII and Latin-1.
#include "common/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/tokenizer/unicode.h"
#include "common/tokenizer/unicode_tables.h"

namespace scd::tokenizer_internal {
namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr int kSCount = kLCount * kNCount;

// Ill-formed input bytes travel through the algorithm as these private values (above the
// Unicode range) so that they are re-emitted byte for byte.
constexpr char32_t kRawByteBase = 0x110000;

struct NfcTables {
  std::unordered_map<char32_t, std::pair<char32_t, char32_t>> decompose;
  std::unordered_map<uint64_t, char32_t> compose;
};

const NfcTables& Tables() {
  static const NfcTables* tables = [] {
    auto* t = new NfcTables;
    t->decompose.reserve(kDecompositionsSize);
    for (size_t i = 0; i < kDecompositionsSize; ++i) {
      const Decomposition& d = kDecompositions[i];
      t->decompose[d.cp] = {d.first, d.second};
      if (d.composes) t->compose[(uint64_t{d.first} << 32) | d.second] = d.cp;
    }
    return t;
  }();
  return *tables;
}

void Decompose(char32_t cp, const NfcTables& tables, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  auto it = tables.decompose.find(cp);
  if (it == tables.decompose.end()) {
    out->push_back(cp);
    return;
  }
  Decompose(it->second.first, tables, out);
  if (it->second.second != 0) Decompose(it->second.second, tables, out);
}

int Ccc(char32_t cp) { return cp >= kRawByteBase ? 0 : CombiningClass(cp); }

// Composite of (a, b), or 0.
char32_t Compose(char32_t a, char32_t b, const NfcTables& tables) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = tables.compose.find((uint64_t{a} << 32) | b);
  return it == tables.compose.end() ? 0 : it->second;
}

}  // namespace

std::string NfcNormalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<uint8_t>(c) < 0xCC; })) {
    return std::string(text);
  }
  const NfcTables& tables = Tables();
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (c.valid) {
      Decompose(c.cp, tables, &cps);
    } else {
      for (int k = 0; k < c.len; ++k) {
        cps.push_back(kRawByteBase + static_cast<uint8_t>(text[pos + k]));
      }
    }
    pos += c.len;
  }
  // Canonical ordering: stable sort of each maximal run of non-starters.
  for (size_t i = 0; i < cps.size();) {
    if (Ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && Ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return Ccc(a) < Ccc(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  ptrdiff_t starter = -1;  // index in `out` of the last starter
  int last_ccc = -1;       // class of the last character appended after that starter
  for (char32_t cp : cps) {
    const int ccc = Ccc(cp);
    if (starter >= 0 && cp < kRawByteBase && out[starter] < kRawByteBase) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const char32_t composite = Compose(out[starter], cp, tables);
        if (composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<ptrdiff_t>(out.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t cp : out) {
    if (cp >= kRawByteBase) {
      result.push_back(static_cast<char>(cp - kRawByteBase));
    } else {
      AppendUtf8(cp, &result);
    }
  }
  return result;
}

}  // namespace scd::tokenizer_internal
