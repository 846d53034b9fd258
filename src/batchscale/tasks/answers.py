"""Answer extraction: the answer a response gives, read as `task.answer_format` says, shared by the reward and by
eval accuracy (tasks.rewards), and by reasoning-gym tasks before their own scorer.

Formats (`ANSWER_FORMATS`), named as verl and TRL users meet them:
- `strict`: the first integer (`-?\\d+`), as written: the built-in model's format (it writes the answer and stops).
  Compared as text with the stripped reference ("082" is not "82", "2.50" not "2.5"): batchscale's behaviour before
  answer formats existed, kept bit for bit for the built-in task. (Not verl's gsm8k `method="strict"`: that is `hash`.)
- `last_number`: the last number in the response ("12 + 35 = 47" gives 47): verl's gsm8k `method="flexible"`, and
  what an instruct model answering in a sentence needs ("The answer is 6.").
- `hash`: the number after `####` (GSM8K's answer format; verl's gsm8k `method="strict"`, the first such number).
- `boxed`: the content of the last `\\boxed{...}` (braces balanced; verl's math reward, `last_boxed_only_string`), or
  of `\\boxed 5`.
- `answer_tag`: the content of the last `<answer>...</answer>` (reasoning-gym's and R1-style prompts).
- `text`: the whole response, stripped (compared exactly: the `exact_match` reward).

A format that finds nothing gives no answer (None), which scores 0. A number is ASCII digits with an optional sign
(not after a letter or digit: "x-3" is 3, "12-3" is 12 and 3), thousands commas only in groups of three ("1,234";
"1,2,3" is three numbers), and decimals ("2.50"); a trailing period ends a sentence, not the number.

Comparison (every format but `strict` and `text`): both the extracted answer and the reference are normalized
(`normalize_answer`): LaTeX spacing, `\\left`/`\\right`, `$`, `\\%`, degrees and `\\text{...}` wrappers dropped,
`\\dfrac`/`\\tfrac` read as `\\frac`, a leading "x =" dropped; then a number becomes its canonical decimal (commas,
a leading +, leading zeros and trailing fractional zeros gone: "1,234.50" is "1234.5", "-0" is "0"), a fraction of
integers its exact value ("\\frac{1}{2}" = "1/2" = "0.5"; 1/3 stays "1/3"), and any other text loses its whitespace.
A reference written as a whole solution (GSM8K's "... #### 72", a MATH solution's "... \\boxed{72}") is read as its
final answer, and one written like a response (a TRL completion: "It is 3.") in the response's format
(`reference_answer`). Departure from math-verify (TRL's accuracy_reward): no symbolic equivalence
("2x" is not "x*2"); answers are compared as normalized text and exact numbers.

Hostile text: every scan is linear (no regex with nested repetition; the last `\\boxed{` and `<answer>` are found by
rfind, not by a lazy match that would rescan to the end from each opening), numbers are canonicalized by string
operations, never converted to int (so 10**5000 digits cost a pass, not Python's int-parsing limit), and a fraction
is evaluated only when both its parts have at most MAX_FRACTION_DIGITS digits.
"""

from __future__ import annotations

import re
from fractions import Fraction

ANSWER_FORMATS = ("strict", "last_number", "hash", "boxed", "answer_tag", "text")
NUMERIC_FORMATS = frozenset({"strict", "last_number", "hash"})  # formats that only ever extract a number
MAX_FRACTION_DIGITS = 18  # numerator and denominator digits up to which a fraction is evaluated exactly

STRICT_INTEGER = re.compile(r"-?\d+")  # the built-in model's format, exactly as before answer formats existed
_BODY = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"  # digits, thousands commas in threes, decimals
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])(?:(?<![)\]])[-+])?" + _BODY, re.ASCII)  # no sign after "12" or "x"
_HASH_NUMBER = re.compile(r"[ \t]*\$?[ \t]*(-?" + _BODY + ")", re.ASCII)
_WHOLE_NUMBER = re.compile(r"([-+])?(\d{1,3}(?:,\d{3})+|\d+)?(?:\.(\d+))?", re.ASCII)
_FRACTION = re.compile(r"(-)?\\frac\{(-?\d+)\}\{(-?\d+)\}|(-)?\\frac(\d)(\d)|(-?\d+)/(-?\d+)", re.ASCII)
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\{([^{}]*)\}")
_LEADING_VARIABLE = re.compile(r"^[A-Za-z]\s*=\s*(?=\S)")
_LATEX_NOISE = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "\\displaystyle", "^\\circ", "^{\\circ}",
                "\\$", "$", "\\%", "%")
_HASH = "####"
_BOXED = "\\boxed"
_OPEN_TAG, _CLOSE_TAG = "<answer>", "</answer>"


def extract_answer(text: str, answer_format: str) -> str | None:
    """The answer `text` gives in `answer_format` (module docstring), or None when it gives none."""
    if answer_format == "strict":
        found = STRICT_INTEGER.search(text)
        return found.group() if found else None
    if answer_format == "last_number":
        return last_number(text)
    if answer_format == "hash":
        return hash_number(text)
    if answer_format == "boxed":
        return last_boxed(text)
    if answer_format == "answer_tag":
        return last_tagged(text)
    if answer_format == "text":
        return text.strip()
    raise ValueError(f"unknown answer format {answer_format!r}; one of {', '.join(ANSWER_FORMATS)}")


def last_number(text: str) -> str | None:
    """The last number in `text`, as written (sign, commas and decimals kept; normalize_answer reads it)."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return last.group() if last else None


def hash_number(text: str) -> str | None:
    """The number right after the first `####` that is followed by one (verl's gsm8k "strict"), `$` allowed."""
    start = text.find(_HASH)
    while start != -1:
        found = _HASH_NUMBER.match(text, start + len(_HASH))
        if found:
            return found.group(1)
        start = text.find(_HASH, start + len(_HASH))
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (its braces balanced, else None), or the token of `\\boxed 5`."""
    start = text.rfind(_BOXED)
    if start == -1:
        return None
    rest = start + len(_BOXED)
    if text.startswith(" ", rest):  # "\boxed 5": up to the next space or "$"
        token = re.match(r" +([^\s$]+)", text[rest:rest + 200])
        return token.group(1) if token else None
    if not text.startswith("{", rest):
        return None
    depth = 0
    for i in range(rest, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[rest + 1:i].strip()
    return None  # unbalanced: no answer


def last_tagged(text: str) -> str | None:
    """The content of the last complete `<answer>...</answer>`, stripped."""
    end = text.rfind(_CLOSE_TAG)
    if end == -1:
        return None
    start = text.rfind(_OPEN_TAG, 0, end)
    return None if start == -1 else text[start + len(_OPEN_TAG):end].strip()


def canonical_number(text: str) -> str | None:
    """The canonical decimal of a number written as `text` ("1,234.50" -> "1234.5", "+007" -> "7", "-0" -> "0"), or
    None if `text` is not one number. String operations only: linear in the length, whatever it is."""
    found = _WHOLE_NUMBER.fullmatch(text)
    if not found or not (found.group(2) or found.group(3)):
        return None
    sign, whole, fraction = found.group(1), found.group(2) or "", found.group(3) or ""
    whole = whole.replace(",", "").lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    value = whole + ("." + fraction if fraction else "")
    return "-" + value if sign == "-" and value != "0" else value


def _canonical_fraction(numerator: str, denominator: str, negative: bool) -> str | None:
    """The exact value of numerator/denominator: a finite decimal when there is one, else "p/q" in lowest terms; None
    past MAX_FRACTION_DIGITS digits or over zero."""
    if max(len(numerator.lstrip("-")), len(denominator.lstrip("-"))) > MAX_FRACTION_DIGITS or int(denominator) == 0:
        return None
    value = Fraction(int(numerator), int(denominator)) * (-1 if negative else 1)
    rest, twos, fives = value.denominator, 0, 0
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:  # no finite decimal
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)  # the fewest decimal places that hold it exactly: 10**places / denominator is whole
    digits = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    text = digits[:len(digits) - places] + ("." + digits[len(digits) - places:] if places else "")
    return canonical_number(("-" if value < 0 else "") + text)


def normalize_answer(text: str) -> str:
    """The form two answers are compared in (module docstring): a canonical number or fraction, else the text without
    LaTeX noise and whitespace."""
    s = text.strip()
    for _ in range(3):  # \text{\textbf{12}}: a few levels, each a linear pass
        s = _TEXT_WRAPPER.sub(r"\1", s)
    for noise in _LATEX_NOISE:
        s = s.replace(noise, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _LEADING_VARIABLE.sub("", s.strip()).strip().rstrip(".").strip()
    number = canonical_number(s)
    if number is not None:
        return number
    fraction = _FRACTION.fullmatch(s)
    if fraction:
        g = fraction.groups()
        parts = (g[1], g[2], bool(g[0])) if g[1] else (g[4], g[5], bool(g[3])) if g[4] else (g[6], g[7], False)
        value = _canonical_fraction(*parts)
        if value is not None:
            return value
    return "".join(s.split())


def reference_answer(answer: str, answer_format: str | None = None) -> str:
    """The final answer of a reference: after GSM8K's `####`, inside a solution's last `\\boxed{}`; else, when the
    reference is itself written like a response (a TRL completion, "It is 3."), read in the response's format
    (`answer_tag`: its tags; `last_number`: its last number, unless it is one number already); else as it is."""
    if _HASH in answer:
        found = hash_number(answer)
        if found is not None:
            return found
    if _BOXED in answer:
        found = last_boxed(answer)
        if found is not None:
            return found
    if answer_format == "answer_tag":
        found = last_tagged(answer)
        if found is not None:
            return found
    if answer_format == "last_number" and canonical_number(normalize_answer(answer)) is None:
        found = last_number(answer)
        if found is not None:
            return found
    return answer


def answers_match(extracted: str | None, answer: str, answer_format: str) -> bool:
    """Whether an extracted answer is the reference `answer`: as text for `strict` and `text`, else normalized."""
    if extracted is None:
        return False
    if answer_format in ("strict", "text"):
        return extracted == answer.strip()
    return normalize_answer(extracted) == normalize_answer(reference_answer(answer, answer_format))
