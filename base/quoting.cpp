#include "base/quoting.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace tdctl {

namespace {

// How many of the first `max` bytes of `word` to keep: never half a UTF-8
// sequence (continuation bytes are 10xxxxxx).
std::size_t cut_at(std::string_view word, std::size_t max)
{
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(word[cut]) & 0xc0) == 0x80)
        --cut;
    return cut;
}

}  // namespace

std::string word_excerpt(std::string_view word, std::size_t max)
{
    if (word.size() <= max)
        return std::string(word);
    return fmt::format("{}... ({} bytes)", word.substr(0, cut_at(word, max)), word.size());
}

std::string quoted_word(std::string_view word, std::size_t max)
{
    if (word.size() <= max)
        return fmt::format("'{}'", word);
    return fmt::format("'{}...' ({} bytes)", word.substr(0, cut_at(word, max)), word.size());
}

std::string long_words_cut(std::string_view message, std::size_t max)
{
    std::string out;
    std::size_t at = 0;
    while (at <= message.size()) {
        const std::size_t end = std::min(message.find(' ', at), message.size());
        out += word_excerpt(message.substr(at, end - at), max);
        if (end == message.size())
            break;
        out += ' ';
        at = end + 1;
    }
    return out;
}

}  // namespace tdctl
