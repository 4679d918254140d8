#!/usr/bin/env python3
"""chat_terminal.py - drives `nemotron chat` on a pseudo-terminal, as a person at a keyboard.

usage: chat_terminal.py NEMOTRON MODEL

Types a message, then the up-arrow key and Enter: with libedit's history the second message is
the first one again (a plain read would send the escape sequence ESC [ A instead). Prints what
the terminal showed, then one line "turns=N recalled=0|1", and exits 0 when the chat ended with 0.
"""
import os
import pty
import select
import sys
import time


def read_until(fd, needle, out, start=0, timeout=30.0):
    """Reads the terminal into out until needle appears at or after out[start] or timeout passed."""
    end = time.time() + timeout
    while out.find(needle, start) < 0 and time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out.extend(chunk)
    return out.find(needle, start) >= 0


def type_at_prompt(fd, out, keys):
    """Waits for a new input prompt, lets libedit take the terminal (it discards what was typed
    before it did), then types keys."""
    read_until(fd, b"> ", out, type_at_prompt.seen)
    type_at_prompt.seen = len(out)
    time.sleep(0.5)
    os.write(fd, keys)


type_at_prompt.seen = 0


def main():
    nemotron, model = sys.argv[1], sys.argv[2]
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(nemotron, [nemotron, "chat", "-m", model, "--no-think", "-n", "4", "--temp", "0",
                            "--verbose-prompt"])
    out = bytearray()
    type_at_prompt(fd, out, b"In the beginning\r")
    read_until(fd, b"[prompt ", out, type_at_prompt.seen)
    type_at_prompt.seen = len(out)
    type_at_prompt(fd, out, b"\x1b[A\r")          # up arrow: the previous line, then Enter
    read_until(fd, b"[prompt ", out, type_at_prompt.seen)
    type_at_prompt.seen = len(out)
    type_at_prompt(fd, out, b"/exit\r")
    read_until(fd, b"\0", out, len(out), 3.0)
    _, status = os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace")
    sys.stdout.write(text)
    # the second prompt's listing (--verbose-prompt) holds the first message twice
    second = text.split("prompt: ")[2] if text.count("prompt: ") >= 2 else ""
    recalled = second.count("'In'") >= 2 or second.count("beginning") >= 2
    print("\nturns=%d recalled=%d" % (text.count("[prompt "), int(recalled)))
    sys.exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1)


main()
