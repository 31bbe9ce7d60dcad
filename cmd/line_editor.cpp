#include "cmd/line_editor.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cwchar>
#include <unistd.h>

#include <histedit.h>

#include "base/error.hpp"
#include "cmd/terminal.hpp"

namespace tdctl::cmd {

namespace {

constexpr wchar_t ctrl_c = 0x03;
constexpr int history_size = 500;
// libedit's history search (Ctrl-R, M-p) compiles the pattern as a regular
// expression and runs it over every entry, once per key typed: longer lines
// (pasted text, not commands) stay out of the history so that a search stays
// quick; meanwhile the target is not serviced.
constexpr std::size_t longest_history_line = 1024;

line_editor* owner_of(EditLine* el)
{
    void* data = nullptr;
    el_wget(el, EL_CLIENTDATA, &data);
    return static_cast<line_editor*>(data);
}

// The line as bytes. Input is decoded in tdctl's locale, so a character the
// locale cannot write back cannot be in the line; it is left out.
std::string narrow(const wchar_t* text, std::size_t length)
{
    std::string out;
    out.reserve(length);
    std::mbstate_t state{};
    for (std::size_t i = 0; i < length; ++i) {
        if (text[i] >= 0 && text[i] < 0x80) {
            out += static_cast<char>(text[i]);
            continue;
        }
        char buf[MB_LEN_MAX];
        std::size_t n = std::wcrtomb(buf, text[i], &state);
        if (n == static_cast<std::size_t>(-1))
            state = std::mbstate_t{};
        else
            out.append(buf, n);
    }
    return out;
}

bool is_blank(const std::wstring& line)
{
    return line.find_first_not_of(L" \t\r\n") == std::wstring::npos;
}

}  // namespace

line_editor::line_editor(std::string prompt, std::string history_path, wait_fn wait, complete_fn complete)
    : prompt_(prompt.begin(), prompt.end()),
      history_path_(std::move(history_path)),
      wait_(std::move(wait)),
      complete_(std::move(complete))
{
    el_ = el_init("tdctl", stdin, stdout, stderr);
    if (el_ == nullptr)
        throw error::from_errno(errno != 0 ? errno : ENOMEM, "starting line editing (libedit el_init)");
    history_ = history_winit();
    if (history_ == nullptr) {
        el_end(el_);
        throw error::from_errno(ENOMEM, "starting the command history (libedit history_winit)");
    }
    HistEventW ev;
    history_w(history_, &ev, H_SETSIZE, history_size);
    history_w(history_, &ev, H_SETUNIQUE, 1);
    if (!history_path_.empty())
        history_w(history_, &ev, H_LOAD, history_path_.c_str());

    el_wset(el_, EL_CLIENTDATA, static_cast<void*>(this));
    el_wset(el_, EL_EDITOR, L"emacs");
    // Signals reach tdctl through its signalfd; libedit must not install handlers.
    el_wset(el_, EL_SIGNAL, 0);
    el_wset(el_, EL_PROMPT, &line_editor::prompt_of);
    el_wset(el_, EL_HIST, history_w, history_);
    el_wset(el_, EL_GETCFN, &line_editor::read_char);
    el_wset(el_, EL_ADDFN, L"tdctl-cancel-line", L"Drop the line being typed (Ctrl-C)", &line_editor::cancel_line);
    el_source(el_, nullptr);
    // After ~/.editrc, whose `bind -v` or `bind -e` resets the key maps.
    el_wset(el_, EL_BIND, L"^C", L"tdctl-cancel-line", nullptr);
    el_wset(el_, EL_BIND, L"-a", L"^C", L"tdctl-cancel-line", nullptr);
    el_wset(el_, EL_ADDFN, L"tdctl-complete", L"Complete the word (Tab)", &line_editor::complete_word);
    el_wset(el_, EL_BIND, L"^I", L"tdctl-complete", nullptr);
    // libedit's own command line (M-x and M-X in emacs mode, `:` in vi
    // command mode) runs editrc commands typed at the prompt, and its parser
    // dereferences a null pointer on some input: not reachable from the keys.
    const wchar_t* editor = nullptr;
    if (el_wget(el_, EL_EDITOR, &editor) == 0 && editor != nullptr && std::wcscmp(editor, L"vi") == 0) {
        el_wset(el_, EL_BIND, L"-a", L":", L"ed-unassigned", nullptr);
    } else {
        for (const wchar_t* key : {L"\\ex", L"\\eX", L"\\370", L"\\330"})
            el_wset(el_, EL_BIND, key, L"ed-unassigned", nullptr);
    }
}

line_editor::~line_editor()
{
    if (!history_path_.empty()) {
        HistEventW ev;
        history_w(history_, &ev, H_SAVE, history_path_.c_str());
    }
    // el_end restores the terminal's modes: not from the background, where
    // they belong to the shell (and with SIGTTOU ignored nothing would stop
    // the write).
    if (terminal_lost_ || !owns_terminal(STDIN_FILENO))
        el_wset(el_, EL_EDITMODE, 0);
    el_end(el_);
    history_wend(history_);
}

wchar_t* line_editor::prompt_of(EditLine* el)
{
    return owner_of(el)->prompt_.data();
}

int line_editor::read_char(EditLine* el, wchar_t* out)
{
    return owner_of(el)->next_char(out);
}

unsigned char line_editor::cancel_line(EditLine* el, int)
{
    // As a shell does: "^C" at the end of what was typed, then a new prompt.
    const LineInfoW* line = el_wline(el);
    el_cursor(el, static_cast<int>(line->lastchar - line->cursor));
    el_winsertstr(el, L"^C");
    owner_of(el)->cancel_step_ = 1;
    return CC_REFRESH;
}

unsigned char line_editor::complete_word(EditLine* el, int)
{
    line_editor* self = owner_of(el);
    if (!self->complete_)
        return CC_ERROR;
    const LineInfoW* line = el_wline(el);
    const auto typed = narrow(line->buffer, static_cast<std::size_t>(line->cursor - line->buffer));
    const completion found = self->complete_(typed);
    if (found.candidates.empty())
        return CC_ERROR;  // a beep
    std::string add = found.candidates.size() == 1 ? found.candidates.front() + " "
                                                   : common_prefix(found.candidates);
    add.erase(0, found.partial.size());
    if (!add.empty()) {
        const std::wstring wide(add.begin(), add.end());
        el_winsertstr(el, wide.c_str());
        return CC_REFRESH;
    }
    // Several, and nothing they share beyond what is typed: list them.
    std::string list;
    for (const auto& c : found.candidates)
        list += c + "  ";
    std::fprintf(stdout, "\r\n%s\r\n", list.c_str());
    std::fflush(stdout);
    return CC_REDISPLAY;
}

int line_editor::next_char(wchar_t* out)
{
    for (;;) {
        if (cancel_step_ == 1) {
            // Ends the cancelled line; read_line() drops it.
            cancel_step_ = 2;
            *out = L'\r';
            return 1;
        }
        if (decode_pending(out))
            return 1;

        editing_ = true;
        const wake why = wait_();
        editing_ = false;
        switch (why) {
        case wake::input:
            if (read_input())
                continue;
            *out = L'\0';
            return 0;  // end of input, or the terminal is gone
        case wake::interrupt:
            *out = ctrl_c;
            return 1;
        case wake::redraw:
            redraw();
            continue;
        case wake::end:
            if (!owns_terminal(STDIN_FILENO)) {
                // el_wgets puts the terminal's modes back on its way out:
                // from the background that would overwrite the shell's.
                terminal_lost_ = true;
                el_wset(el_, EL_EDITMODE, 0);
            }
            *out = L'\0';
            return 0;
        }
    }
}

bool line_editor::decode_pending(wchar_t* out)
{
    while (!pending_.empty()) {
        wchar_t wc = 0;
        std::size_t n = std::mbrtowc(&wc, pending_.data(), pending_.size(), &decode_);
        if (n == static_cast<std::size_t>(-2)) {
            pending_.clear();  // kept in decode_ until the rest arrives
            return false;
        }
        if (n == static_cast<std::size_t>(-1)) {
            // Not a character in this locale: dropped, as libedit's own reader does.
            decode_ = std::mbstate_t{};
            pending_.erase(0, 1);
            continue;
        }
        pending_.erase(0, n == 0 ? 1 : n);
        *out = wc;
        return true;
    }
    return false;
}

bool line_editor::read_input()
{
    char buf[4096];
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0) {
        pending_.append(buf, static_cast<std::size_t>(n));
        return true;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    // EIO from the background (the terminal changed hands after the wait
    // looked): not the end, the wait holds off until it is ours.
    return n < 0 && errno == EIO && !owns_terminal(STDIN_FILENO);
}

void line_editor::redraw()
{
    // The shell had the terminal: its modes are whatever it left. Going
    // through libedit's cooked mode makes it read them again and set its own.
    el_wset(el_, EL_PREP_TERM, 0);
    el_wset(el_, EL_PREP_TERM, 1);
    std::fputs("\r\033[K", stdout);
    el_wset(el_, EL_REFRESH);
}

std::optional<std::string> line_editor::read_line()
{
    // el_wgets draws the prompt before it sets the terminal up for editing;
    // set up first, so that no key is taken by the terminal's own line
    // editing and no stop can fall between the two.
    el_wset(el_, EL_PREP_TERM, 1);
    int count = 0;
    const wchar_t* text = el_wgets(el_, &count);
    const bool cancelled = cancel_step_ == 2;
    cancel_step_ = 0;
    if (text == nullptr || count < 0)
        return std::nullopt;
    if (cancelled)
        return std::string();
    std::wstring line(text, static_cast<std::size_t>(count));
    while (!line.empty() && (line.back() == L'\n' || line.back() == L'\r'))
        line.pop_back();
    if (!is_blank(line) && line.size() <= longest_history_line) {
        HistEventW ev;
        history_w(history_, &ev, H_ENTER, line.c_str());
    }
    return narrow(line.data(), line.size());
}

void line_editor::before_output()
{
    if (!editing_)
        return;
    std::fputs("\r\033[K", stdout);
    std::fflush(stdout);
}

void line_editor::after_output()
{
    if (editing_)
        el_wset(el_, EL_REFRESH);
}

}  // namespace tdctl::cmd
