"""Where an editor completion stops, the FIM prompt's layout, and the store
of earlier outputs: pure logic (a fake vocabulary stands in for a model
only to check the token layout)."""


from spec_cli.run.editor import EditorStops, cursor_indent, fim_prompt
from spec_cli.run.suffix import Lookup, Store
from spec_cli.run.session import _between


# -- n_indent, as llama-server defines it ---------------------------------------

def test_n_indent_stops_at_a_line_indented_less_than_the_cursor():
    stops = EditorStops(n_indent=4)
    text = "return a + b\n\ndef subtract(a, b):\n"
    # llama-server: the blank line's first character (its new line) comes at indentation 0 < 4
    assert stops.cut(text) == len("return a + b\n")
    assert stops.cut("x = 1\n    y = 2\n  z") == len("x = 1\n    y = 2\n  ")  # cut after the indentation
    assert stops.cut("x = 1\n    y = 2\n    ") is None  # the line has not begun: wait
    assert stops.cut("return a + b") is None  # the cursor's own line is never judged
    assert EditorStops(n_indent=0).cut(text) is None


def test_cursor_indent():
    assert cursor_indent("def f():\n    ") == 4
    assert cursor_indent("def f():\n\tx = 1\n\t") == 1
    assert cursor_indent("x") == 0


# -- the suffix repeated ---------------------------------------------------------

def test_repeating_the_suffix_ends_the_completion_before_it():
    stops = EditorStops(suffix="\n\nprint(add(1, 2))\n")
    assert stops.cut("return a + b\n\nprint(add(1, 2))\n") == len("return a + b")
    assert stops.cut("return a + b\n\nprint(add(1, 2))") is None  # the line is not complete yet
    assert stops.cut("return a + b\n\nprint(add(3, 4))\n") is None  # another line


def test_a_short_suffix_line_needs_the_next_one_too():
    """A lone `}` in the completion may close a nested block: only `}`
    followed by the suffix's next line is an echo."""
    stops = EditorStops(suffix="}\n\nint main() {\n")
    assert stops.cut("  if (x) {\n    y();\n  }\n  z();\n") is None
    assert stops.cut("  z();\n}\n\nint main() {\n") == len("  z();")


def test_hold_keeps_back_what_may_turn_out_to_repeat_the_suffix():
    stops = EditorStops(suffix="\n\nprint(add(1, 2))\n")
    assert stops.hold("return a + b\n\npri") == len("return a + b")  # may become the suffix's line
    assert stops.hold("return a + b\n\nx = 3") == len("return a + b\n\nx = 3")
    assert stops.hold("return a + b\n\n") == len("return a + b")  # trailing blank lines wait
    assert EditorStops().hold("abc\n\n") == 5  # no suffix: nothing waits


def test_max_lines_and_the_time_limit():
    assert EditorStops(max_lines=2).cut("a\nb\nc") == len("a\nb")
    assert EditorStops(max_lines=2).cut("a\nb") is None
    timed = EditorStops(t_max_predict_ms=100)
    assert timed.cut("a\nb\nc", 0.05) is None                   # in time
    assert timed.cut("a\nb", 0.2, new_from=2) is None           # late, but this step wrote no new line
    assert timed.cut("a\nb\nc\nd", 0.2, new_from=2) == len("a\nb\n")  # at the first new line written late


def test_between_slices_segments_by_characters():
    segs = [("ab", True), ("cd", False), ("e", True)]
    assert _between(segs, 1, 4) == (("b", True), ("cd", False))
    assert _between(segs, 0, 0) == ()


# -- the FIM prompt ---------------------------------------------------------------

class FakeVocab:
    """One token per character, ids 0-255; FIM specials at 1000+."""

    add_bos = True

    def __init__(self, *, rep_sep: bool = True, fim: bool = True):
        self.sp = {"bos": 999, "eos": 998, "eot": -1, "fim_pre": 1000 if fim else -1, "fim_suf": 1001 if fim else -1,
                   "fim_mid": 1002 if fim else -1, "fim_pad": -1, "fim_rep": 1003 if rep_sep else -1,
                   "fim_sep": 1004 if rep_sep else -1}

    def special_tokens(self):
        return self.sp

    def tokenize(self, text, add_special=False):
        return [ord(c) % 256 for c in text]


def test_fim_layout_is_llama_servers():
    v = FakeVocab()
    fim = fim_prompt(v, "ab", "cd", middle="x", extra=[("f.py", "zz")])
    t = lambda s: [ord(c) for c in s]  # noqa: E731
    assert fim.fim and not fim.truncated
    assert fim.tokens == ([999, 1003] + t("myproject\n") + [1004] + t("f.py\n") + t("zz") + [1004] + t("filename\n")
                          + [1000] + t("abx") + [1001] + t("cd") + [1002])


def test_fim_cuts_the_prefix_start_and_the_suffix_end_to_fit():
    v = FakeVocab()
    fim = fim_prompt(v, "p" * 100, "s" * 100, extra=[("f", "e" * 50)], budget=44)
    assert fim.truncated and len(fim.tokens) <= 44
    body = fim.tokens[fim.tokens.index(1000) + 1:]
    pre, suf = body[:body.index(1001)], body[body.index(1001) + 1:-1]
    assert len(pre) == 30 and len(suf) == 10  # three quarters : one quarter
    assert 1003 not in fim.tokens  # no room left for the extra chunks


def test_without_fim_tokens_the_prefix_alone():
    fim = fim_prompt(FakeVocab(fim=False), "abc", "ignored")
    assert not fim.fim and fim.tokens == [999, ord("a"), ord("b"), ord("c")]


# -- drafts from earlier outputs ---------------------------------------------------

def test_the_store_drafts_a_repeated_request():
    store = Store()
    prompt = list(range(100, 140))
    output = [7, 8, 9, 10, 11, 12]
    store.add(prompt, output)
    lookup = Lookup(store=store)
    lookup.prepare(prompt)
    hist = [c for c in lookup.candidates(prompt) if c.source.startswith("hist")]
    assert hist and hist[0].source == "hist16"  # the whole 16-token window matched
    assert lookup.draft(prompt, hist[0], 4).tokens == [7, 8, 9, 10]


def test_the_store_is_bounded_and_forgets_the_least_recently_used():
    store = Store(max_tokens=100)
    for i in range(10):
        store.add([], [1000 * i + j for j in range(30)])
    assert store.tokens <= 100 and len(store) == 3
    assert store.index.match([9000, 9001])[0] == 2   # the latest is kept
    assert store.index.match([0, 1])[0] == 0         # the oldest went
    store.add([], [9000 + j for j in range(30)])      # a repeat is not stored twice
    assert len(store) == 3


def test_store_entries_do_not_run_into_each_other():
    store = Store()
    store.add([], [1, 2, 3])
    store.add([], [4, 5, 6])
    assert store.index.match([3, 4])[0] == 1  # "3" matched, "3 4" spans the separator: not a context
    assert store.index.follow([2, 3], 4, 0.0)[0] == []  # nothing follows an entry's end


# -- the insertion rules: where a middle meets the suffix ----------------------------------

def test_a_middle_that_runs_on_into_new_top_level_code_ends_before_it():
    stops = EditorStops(suffix="\n\nprint(add(1, 2))\n", prefix="def add(a, b):\n    return ")
    text = "a + b\n\ndef subtract(a, b):\n    return a - b\n"
    assert text[:stops.cut(text)] == "a + b"
    assert EditorStops(suffix="\n\nprint(add(1, 2))\n", prefix="def add(a, b):\n    return ",
                       insertion=False).cut(text) is None  # a client that trims itself


def test_a_middle_that_leaves_the_block_ends_there_and_keeps_its_new_line_at_a_line_start():
    prefix = "def f(xs):\n    total = 0\n    for x in xs:\n"
    stops = EditorStops(suffix="    return total\n", prefix=prefix)
    assert stops.cut("        total += x\n") is None
    text = "        total += x\n    total *= 2\nprint(f([1]))\n"
    assert text[:stops.cut(text)] == "        total += x\n    total *= 2\n"  # back at the suffix's level: kept
    echo = "        total += x\n    return total\n"
    assert echo[:stops.cut(echo)] == "        total += x\n"  # the suffix's line: the middle ends before it
    deeper = EditorStops(suffix="            b += i\n", prefix="    x = 0\n")
    assert deeper.cut("    a = 1\n    for i in x:\n") is None  # a block opened for the suffix's line


def test_a_closing_brace_in_the_suffix_is_not_written_twice():
    stops = EditorStops(suffix="}\n", prefix="int f(int x) {\n")
    text = "    return x + 1;\n}\n\nint g() {\n"
    assert text[:stops.cut(text)] == "    return x + 1;\n"


def test_a_raw_prompt_in_the_models_fim_template_is_recognised_in_either_order():
    from spec_cli.serve.api import parse_completion
    from spec_cli.serve.start import recognize_fim

    marks = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    psm = parse_completion({"prompt": "<|fim_prefix|>def f(<|fim_suffix|>):\n<|fim_middle|>a"})
    recognize_fim(marks, psm)
    assert (psm.kind, psm.input_prefix, psm.input_suffix, psm.fim_from) == ("infill", "def f(a", "):\n", "prompt")
    assert psm.fim_text.startswith("<|fim_prefix|>")  # read as the client wrote it
    spm = parse_completion({"prompt": "<|fim_suffix|>):\n<|fim_prefix|>def f(<|fim_middle|>"})
    recognize_fim(marks, spm)
    assert (spm.input_prefix, spm.input_suffix) == ("def f(", "):\n")
    for prompt in ("def f(", "<|fim_prefix|>a<|fim_middle|>b",  # plain, or markers missing
                   "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>c<|fim_prefix|>"):  # one twice
        other = parse_completion({"prompt": prompt})
        recognize_fim(marks, other)
        assert other.kind == "completion"
    recognize_fim(None, plain := parse_completion({"prompt": psm.fim_text}))  # a model without FIM tokens
    assert plain.kind == "completion"
