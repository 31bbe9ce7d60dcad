// Line editing at the terminal with libedit's native interface (el_wgets):
// emacs keys, a history file, and a read-character hook through which the
// owner keeps servicing the target while the user types. (libedit's
// readline-compatible callback interface corrupts the heap on long lines in
// libedit 3.1-20221030; this interface does not go through it.)
#pragma once

#include <cwchar>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cmd/completion.hpp"

struct editline;
struct historyW;

namespace tdctl::cmd {

class line_editor {
public:
    /// Why the owner's wait returned.
    enum class wake {
        input,      ///< the terminal has input to read
        interrupt,  ///< Ctrl-C: the line being typed is dropped
        redraw,     ///< tdctl has the terminal again (continued after a stop, or
                    ///< brought to the foreground): set it up and draw the line again
        end,        ///< stop reading: read_line() returns nullopt
    };
    /// Called whenever the editor needs a key and has none buffered; blocks
    /// until one of the reasons above. It returns `input` only while tdctl
    /// owns the terminal (see terminal.hpp).
    using wait_fn = std::function<wake()>;
    /// What Tab offers for the text before the cursor (completion.hpp).
    using complete_fn = std::function<completion(std::string_view before_cursor)>;

    /// Starts libedit on stdin/stdout/stderr with emacs keys, reads
    /// ~/.editrc (or $EDITRC) and loads the history from `history_path`
    /// (no history file when empty). Tab asks `complete` (none: Tab beeps).
    /// Create it only while tdctl owns the terminal: libedit reads and sets
    /// the terminal's modes.
    line_editor(std::string prompt, std::string history_path, wait_fn wait, complete_fn complete = {});
    /// Saves the history; puts the terminal's modes back unless tdctl no
    /// longer owns the terminal (then they are the shell's to keep).
    ~line_editor();
    line_editor(const line_editor&) = delete;
    line_editor& operator=(const line_editor&) = delete;

    /// One line without its newline; a non-blank line also goes into the
    /// history. An empty string after Ctrl-C. nullopt at end of input (Ctrl-D
    /// on an empty line, the terminal closed) or when the wait said `end`.
    /// Sets the terminal's modes for editing first: call it only while tdctl
    /// owns the terminal.
    std::optional<std::string> read_line();

    /// While a line is being edited, output goes above it: before_output()
    /// takes the line off the screen, after_output() draws it again. Both do
    /// nothing while no line is being edited.
    void before_output();
    void after_output();

private:
    static int read_char(editline* el, wchar_t* out);
    static unsigned char cancel_line(editline* el, int key);
    /// Tab: the one candidate (and a blank), else what they share, else the
    /// list of them under the line.
    static unsigned char complete_word(editline* el, int key);
    static wchar_t* prompt_of(editline* el);
    int next_char(wchar_t* out);
    /// The next character of the bytes already read into `out`; false when
    /// they hold no whole one.
    bool decode_pending(wchar_t* out);
    /// Reads what the terminal has into the pending bytes; false at the end
    /// of input (or a terminal that is gone).
    bool read_input();
    void redraw();

    editline* el_ = nullptr;
    historyW* history_ = nullptr;
    std::wstring prompt_;
    std::string history_path_;
    wait_fn wait_;
    complete_fn complete_;
    std::string pending_;     ///< bytes read from the terminal, not yet decoded
    std::mbstate_t decode_{};
    int cancel_step_ = 0;     ///< 1: "^C" shown, the next key ends the line; 2: that line is dropped
    bool editing_ = false;    ///< the prompt and the line are on the screen
    bool terminal_lost_ = false;
};

}  // namespace tdctl::cmd
