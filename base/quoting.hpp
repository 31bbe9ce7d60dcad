// Words a user typed, shown in messages. A bad word can be a paste of
// kilobytes: a message shows its first bytes and how long it was, never
// the whole of it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tdctl {

/// At most this many bytes of one word go into a message.
inline constexpr std::size_t word_excerpt_bytes = 80;

/// `word` whole when it has at most `max` bytes; else its first `max` bytes
/// (cut before a UTF-8 sequence that would not fit whole), "..." and its
/// length: "aaaa... (10240 bytes)".
std::string word_excerpt(std::string_view word, std::size_t max = word_excerpt_bytes);

/// word_excerpt() in single quotes, the length after them: 'frob',
/// 'aaaa...' (10240 bytes).
std::string quoted_word(std::string_view word, std::size_t max = word_excerpt_bytes);

/// A message made elsewhere (an option parser's, a failed exec's) that may
/// hold a word as typed: each of its space-separated words cut as
/// word_excerpt() cuts one.
std::string long_words_cut(std::string_view message, std::size_t max = word_excerpt_bytes);

}  // namespace tdctl
