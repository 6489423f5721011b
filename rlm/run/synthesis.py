"""Forced synthesis: the answer is always written here, from the ledger.

Whatever the loop produced (a final draft, nothing, an error, a budget stop),
one more model call without tools turns the question and the findings into
the answer. If that call fails or its answer is refused, the draft is the
(partial) answer; without a draft there is no answer: what was established is
kept (`established`) for stderr and --json, never printed as a value.

The call is admitted by the budget like any other: a child's synthesis is an
ordinary call (refused once a limit is reached: its draft or findings stand
in), the root's uses the call, tokens and the end of --max-time held back for
it. A provider the run has already given up on is not asked again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from rlm.errors import RlmError
from rlm.model.budget import Budget, BudgetExceeded
from rlm.model.client import ModelClient, Reply
from rlm.model.tokens import count_text
from rlm.run import prompts
from rlm.run.context import Item
from rlm.run.framing import unframe
from rlm.run.grounding import Grounding, ground, normalised, values_counter
from rlm.run.ledger import Finding
from rlm.run.routing import SPECS, Payload, Router, relevance, weight_of
from rlm.trace.schema import AnswerSource

_CITATION = re.compile(r"\s*\[(F\d+)\]")
_ID = re.compile(r"\b[FMO]\d+\b", re.I)
_LEAD_IN = re.compile(r"^(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:\-]\s*", re.I)


@dataclass
class Synthesis:
    answer: str | None
    source: AnswerSource
    reply: Reply | None = None
    error: str | None = None
    prompt_tokens_est: int = 0
    explanation: str = ""
    citations: list[str] = field(default_factory=list)  # checked: ids that were in the prompt
    unknown_citations: list[str] = field(default_factory=list)  # cited but never offered: dropped
    payload: dict[str, Any] = field(default_factory=dict)
    confidence: str | None = None  # high | medium | low, as the synthesis judged its answer
    confidence_reason: str = ""
    first_attempt: dict[str, Any] | None = None  # a low-confidence answer a widened pass replaced
    stated_confidence: str | None = None  # as the reply gave it, before it was checked (`confidence`)
    # Whether the answer's values are held by what the prompt showed (None: no synthesised answer).
    grounding: Grounding | None = None
    # With no answer: what the investigation established, one finding a line ("- text [F2]"), for
    # the run's message and a parent's sub-call; never an answer (a script would take it as one).
    established: str = ""


def _confidence(text: str) -> tuple[str | None, str]:
    """The confidence a synthesis reply gave its answer, and why (None when it gave none)."""
    obj = _json_object(text) or {}
    level = str(obj.get("confidence") or "").strip().lower()
    if not level:
        found = re.search(r'"confidence"\s*:\s*"(high|medium|low)"', text, re.I)
        level = found.group(1).lower() if found else ""
    reason = str(obj.get("confidence_reason") or "")
    if not reason:
        found = re.search(r'"confidence_reason"\s*:\s*"([^"\n]*)"', text)
        reason = found.group(1) if found else ""
    return (level if level in ("high", "medium", "low") else None), reason.strip()


def _evidence_shown(shown: dict[str, str], findings: list[Finding]) -> dict[str, str]:
    """What each entry the prompt showed states as evidence (a result's code left out)."""
    by_id = {f.id: f for f in findings}
    return {ref: by_id[ref].said(text) if ref in by_id else text for ref, text in shown.items()}


def checked_confidence(stated: str | None, reason: str, grounding: Grounding) -> tuple[str | None, str]:
    """The confidence an answer keeps once its grounding is known: an answer stating a value that
    no finding shown holds is low, whatever the reply claimed (a small model words a guess as
    confidently as a count), and the reason says which value."""
    if grounding.grounded is not False or stated == "low":
        return stated, reason
    missing = ", ".join(grounding.missing[:3])
    why = (
        f"{missing} is in no finding shown"
        if len(grounding.missing) == 1
        else f"{missing} are in no finding shown"
    )
    return "low", f"{why} (the reply said {stated or 'nothing'}{': ' + reason if reason else ''})"


def _fallback(draft: str | None, findings: list[Finding], error: str | None) -> Synthesis:
    if draft and _usable(draft):
        return Synthesis(held_whole(draft.strip(), _findings_text(findings)), "draft", error=error)
    useful = [f for f in findings if f.kind != "final_draft"]
    if useful:
        text = "\n".join(f"- {f.text} [{f.id}]" for f in useful[-12:])
        return Synthesis(None, "findings", error=error, established=text)
    return Synthesis(None, "none", error=error)


def _findings_text(findings: list[Finding], observations: list[str] | None = None) -> str:
    """The findings and observations as one text, each finding whole: what values are looked up in."""
    return "\n".join([*(f.full or f.text for f in findings), *(observations or [])])


# A template a model copied instead of answering: "<the answer ...>", "[insert the IP here]".
_PLACEHOLDER = re.compile(r"^\s*(?:<[^<>]{3,}>|\[(?:insert|your|the answer)[^\]]*\])\s*\.?\s*$", re.I)
# Figures in an answer: 1873, 438,281,483, 12.5, 14:02 (each must appear in the evidence).
_FIGURE = re.compile(r"\d+(?:[.,:]\d+)*")


def _usable(text: str) -> bool:
    stripped = text.strip()
    return (
        bool(stripped)
        and not stripped.lower().startswith(("[error", "error:"))
        and not _PLACEHOLDER.match(stripped)
    )


def ungrounded_figures(answer: str, evidence: str) -> list[str]:
    """The figures of `answer` that appear nowhere in `evidence` (thousands separators ignored).

    The synthesis answers from findings; a figure found in none of them was made up,
    and a script would take it as fact.
    """
    flat = evidence.replace(",", "").replace("_", "")
    missing = []
    for figure in dict.fromkeys(_FIGURE.findall(answer)):
        if figure not in evidence and figure.replace(",", "") not in flat:
            missing.append(figure)
    return missing


def unsupported(
    answer: str, cited: list[str], shown: dict[str, str], context: str, everything: str
) -> str | None:
    """Why `answer` does not stand on what it cites, or None when it does.

    `shown` maps the ids the prompt offered to their whole text; `context` is what the answer may
    rest on besides them (the question, the draft); `everything` is all the evidence. An answer
    that cites only ids that are no entry (an id a printed line made up: `[F3] established: ...`)
    stands on nothing. One that cites real entries must find its figures in them or in `context`:
    a figure that is only in another entry's text (a line of the file a cell printed) is not what
    the cited entries established.
    """
    real = [c for c in cited if c in shown]
    if cited and not real:
        which = "which is no finding" if len(cited) == 1 else "which are no findings"
        return f"it cited {', '.join(cited)}, {which} it was shown, and was not used"
    missing = ungrounded_figures(answer, everything)
    if missing:
        return f"its answer named {', '.join(missing)}, found in no finding, and was not used"
    if real:
        missing = ungrounded_figures(answer, "\n".join([context, *(shown[c] for c in real)]))
        if missing:
            return (
                f"its answer named {', '.join(missing)}, found in none of the findings it cited "
                f"({', '.join(real)}), and was not used"
            )
    return None


_YES_NO = {"yes": True, "true": True, "no": False, "false": False}


def _says_yes(text: str) -> bool | None:
    """What an answer that begins with yes or no (true, false) says; None for any other answer."""
    words = re.findall(r"[a-z]+", text.casefold()[:40])
    return _YES_NO.get(words[0]) if words else None


def _zero(text: str) -> bool:
    plain = text.strip().rstrip(".").replace(",", "")
    try:
        return float(plain) == 0
    except ValueError:
        return False


def turned_over(answer: str, draft: str | None, question: str = "") -> str | None:
    """Why a synthesis answer is not used where it says yes to the investigation's no, or no to
    its yes, or names a value where it found none: the synthesis writes the answer from the same evidence the investigation answered
    from, and a small model turned a "No" over while its own explanation said none was found."""
    said, drafted = _says_yes(answer), _says_yes(draft or "")
    # A value where the investigation found none ("No sub-region has ..."): a small model named a
    # value the question states. Not a count of 0, nor a value the draft names that the question
    # does not.
    if said is None and drafted is False and answer.strip() and not _zero(answer):
        named = normalised(answer)
        if named not in normalised(draft or "") or named in normalised(question):
            return (
                f"its answer ({answer.strip()[:40]}) names a value where the investigation's "
                f"({(draft or '').strip()[:40]}) found none, and was not used"
            )
    if said is None or drafted is None or said == drafted:
        return None
    return f"its answer ({answer.strip()[:40]}) turned over the investigation's ({(draft or '').strip()[:40]}), and was not used"


def copied_code(answer: str, findings: list[Finding]) -> bool:
    """Whether `answer` is (part of) the code behind a result rather than anything it printed:
    a small model asked for the answer sometimes copies the finding's code.

    Only a result's code is code. What any finding says besides it (a note's text, a sub-call's
    answer, a grep's lines, what a cell printed) is evidence: an answer found there is a value,
    even when the same words are also a string in a cell's code (`note("the log shows 17 deploys")`).
    """
    flat = " ".join(answer.split())
    if len(flat) < 8:
        return False
    code = [" ".join(f.code.split()) for f in findings if f.code is not None]
    said = [" ".join(f.said().split()) for f in findings]
    return any(flat in c for c in code) and not any(flat in t for t in said)


def kept_exact(answer: str, draft: str | None, findings_text: str) -> str:
    """The draft where the synthesis wrote the same value less exactly.

    A small model rewrites a value it was given: `/favicon.ico` became `favicon.ico`, a list of
    one item per line became one line with commas (or spaces). Where the draft is a value a finding holds
    word for word (one token: a path, an address, a name) and the answer is it less punctuation, or
    where the answer lists the draft's lines in another layout, the draft is the answer; where the
    draft is a sentence, the one word of it that is the answer with punctuation is.
    """
    if not draft:
        return held_whole(answer, findings_text)
    exact, given = draft.strip(), answer.strip()
    if not exact or exact == given:
        return held_whole(answer, findings_text)
    # Only punctuation lost ('/' of a path, quotes): '35' for a draft of '350' is another value.
    lost = exact.replace(given, "", 1) if given else exact
    if (
        not re.search(r"\s", exact)
        and given in exact
        and not re.search(r"\w", lost)
        and exact in findings_text
    ):
        return exact
    # A draft written as a sentence ("The path '/favicon.ico' was requested most") names the
    # value as one of its words: the one word that is the answer plus punctuation alone, held
    # by a finding where the answer on its own is not. So for each item of a list written on
    # one line ("misc/a.txt, b/" for a draft naming "/misc/a.txt, /b/"), each on its own.
    words = {_bare(w) for w in exact.split()}
    pieces = re.split(r"(,\s*|;\s*|\n)", given)
    mended = [_fuller(piece, words, findings_text) if k % 2 == 0 else piece for k, piece in enumerate(pieces)]
    if mended != pieces:
        return "".join(mended)
    lines = [ln.strip() for ln in exact.split("\n") if ln.strip()]
    # Items of one word each may also have been written on one line with spaces between them.
    apart = r"[,;\s]+" if all(len(ln.split()) == 1 for ln in lines) else r"[,;\n]+"
    items = [p.strip().strip("'\"") for p in re.split(apart, given.strip("[]() ")) if p.strip()]
    if len(lines) > 1 and sorted(items) == sorted(lines) and all(ln in findings_text for ln in lines):
        return "\n".join(lines)
    return held_whole(answer, findings_text)


def _bare(word: str) -> str:
    """A word as a value: without the quotes and brackets around it, nor a sentence's stop after."""
    return word.strip("'\"`()[]").rstrip(".,;:!?").strip("'\"`")


def held_whole(answer: str, findings_text: str) -> str:
    """Each item of `answer` (one line, or a list on one line) that a finding holds only with more
    punctuation, as the finding holds it: the draft itself may have dropped a path's leading '/'
    ("misc/a.txt" where the rows say "/misc/a.txt"). An item is changed only where one word of
    the findings is it plus punctuation alone and none of their words is the item as written; a
    number never is (its sign or unit is another value, and numbers are compared by value)."""
    words = {_bare(w) for w in findings_text.split()}
    pieces = re.split(r"(,\s*|;\s*|\n)", answer)
    mended = [_fuller(piece, words, findings_text) if k % 2 == 0 else piece for k, piece in enumerate(pieces)]
    return "".join(mended) if mended != pieces else answer


def _fuller(given: str, words: set[str], findings_text: str) -> str:
    """The one word of a draft that is `given` plus punctuation alone, held by a finding where
    `given` on its own is not; else `given`."""
    if (
        not re.search(r"\w", given)
        or re.search(r"\s", given)
        or _FIGURE.fullmatch(given)
        or re.search(rf"(?<!\S){re.escape(given)}(?!\S)", findings_text)
    ):
        return given
    fuller = {
        w
        for w in words
        if w != given and given in w and not re.search(r"\w", w.replace(given, "", 1)) and w in findings_text
    }
    return fuller.pop() if len(fuller) == 1 else given


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "\n".join(_as_text(v) for v in value)
    return str(value).strip()


def _json_object(text: str) -> dict[str, Any] | None:
    stripped = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    candidates = [stripped]
    found = re.search(r"\{.*\}", stripped, re.S)
    if found and found.group(0) != stripped:
        candidates.append(found.group(0))
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict) and "answer" in value:
            return value
    return None


# The fields of a JSON object a small model broke (an unescaped quote in its explanation is the
# usual way): each value read on its own.
_FIELD = {
    key: re.compile(rf'"{key}"\s*:\s*("(?:[^"\\\n]|\\.)*"|\[[^\]]*\]|-?\d[\d.]*|true|false)', re.S)
    for key in ("answer", "citations")
}


def _broken_json_object(text: str) -> dict[str, Any] | None:
    """`answer` (and `citations`) from an object that is not valid JSON as a whole."""
    found = _FIELD["answer"].search(text)
    if found is None:
        return None
    try:
        obj: dict[str, Any] = {"answer": json.loads(found.group(1))}
    except ValueError:
        return None
    cited = _FIELD["citations"].search(text)
    if cited is not None:
        obj["citations"] = re.findall(r"[FM]\d+", cited.group(1))
    explained = re.search(r'"explanation"\s*:\s*"(.*?)"\s*,\s*"citations"', text, re.S)
    if explained is not None:
        obj["explanation"] = explained.group(1)
    return obj


def parse_answer(text: str) -> tuple[str, str, list[str]]:
    """(answer, explanation, citations) from a synthesis reply: the JSON object asked for (or its
    fields, when the object is broken), or, from a model that wrote prose instead, its first
    paragraph as the answer."""
    text = unframe(text)  # a model may copy the frame's tags around the value it quotes
    obj = _json_object(text) or _broken_json_object(text)
    if obj is not None:
        cited = obj.get("citations") or []
        # The ids a citation names ("F1", "[F1]", "f1: the count"); one that names none is no citation.
        citations = [
            i.upper() for c in (cited if isinstance(cited, list) else [cited]) for i in _ID.findall(str(c))
        ]
        answer = _CITATION.sub("", _as_text(obj.get("answer", "")))
        return answer.strip(), _as_text(obj.get("explanation") or ""), citations
    citations = _CITATION.findall(text)
    plain = _CITATION.sub("", text).strip()
    first, _, rest = plain.partition("\n\n")
    return _LEAD_IN.sub("", first.strip()), rest.strip(), citations


def context_budget(window: int, reply_tokens: int) -> int:
    """Tokens for the findings, memories and observations of a synthesis prompt (its spec's rule)."""
    return SPECS["synthesis"].budget(window - reply_tokens)


SUPPORT_BOOST = 10.0  # a finding holding the draft's values outranks every other when room is short


def assemble_context(
    question: str, findings: list[Finding], observations: list[str], budget: int, draft: str | None = None
) -> Payload:
    """Findings, memories of earlier runs and the last observations, routed by the synthesis spec
    within `budget` tokens.

    Each finding is offered whole (its full output, not the cut the investigation's prompts
    show), so what is left of the budget is filled with evidence; one too large is cut around
    the lines that hold the draft's values. The findings holding the draft's values rank first,
    and the one holding most of them is the top item: shown at the start and the end of the block.
    Without a draft that any finding holds, the top item is the finding the question's focus ranks
    first, and there is none when the focus picks none out.
    """
    router = Router("synthesis", question, budget)
    held = values_counter(draft)
    support = {f.id: held(f.said()) for f in findings}
    weighed = [
        (f, weight_of(f) + SUPPORT_BOOST * bool(support[f.id]) + support[f.id] / 100 + i / 1000)
        for i, f in enumerate(findings)
    ]
    # Each entry is headed by what rlm knows of it (id, kind, step) and its text framed: a line a
    # cell printed (`[F3] established: ...`) is shown inside the finding of that cell.
    source = {f.id: f"{f.kind}, {f.evidence}" for f in findings}
    evidence = {f.id: f.evidence for f in findings}  # a memory's: its id, age, question and standing
    found = [
        replace(i, source=source[i.id])
        for i in router.items([(f.id, f.full or f.text, w) for f, w in weighed if f.kind != "memory"])
    ]
    memories = [
        replace(i, source=f"earlier run, {evidence[i.id]}")
        for i in router.items([(f.id, f.full or f.text, w) for f, w in weighed if f.kind == "memory"])
    ]
    recent = [Item(f"O{k + 1}", o, float(k), source="what the model saw") for k, o in enumerate(observations)]
    holding = [i for i in [*found, *memories] if support[i.id]]
    # Without a finding holding the draft's values, the one the question's focus ranks first (it
    # names the question's entities or its time), if any does; never a memory, never by kind alone.
    focused = [i for i in found if relevance(i.text, router.focus) > 0]
    top = max(holding, key=lambda i: (support[i.id], i.priority), default=None) or max(
        focused, key=lambda i: i.priority, default=None
    )
    return router.assemble(
        {
            "findings": ("Findings:", found),
            "memories": ("Established by earlier runs over this file:", memories),
            "observations": ("Last observations of the investigation:", recent),
        },
        top=top,
        keep=(lambda line: held(line) > 0) if draft else None,
    )


def synthesize(
    model: ModelClient,
    question: str,
    findings: list[Finding],
    draft: str | None,
    *,
    observations: list[str] | None = None,
    stop_note: str | None,
    max_tokens: int,
    context_tokens: int = 4000,
    budget: Budget | None = None,
    final: bool = False,
) -> Synthesis:
    """One call with no tools; never raises for provider trouble.

    `findings` are those that stand (no drafts: the draft comes whole, on its own).
    """
    if draft is not None and not _usable(draft):
        draft = None  # a copied template or an error line is no draft to write from
    if not findings and not draft:
        return Synthesis(None, "none")
    routed = assemble_context(question, findings, observations or [], context_tokens, draft)
    routed.whole = {"question": count_text(question), "draft": count_text(draft or "")}
    block = routed.assembly
    messages = [
        {"role": "system", "content": prompts.SYNTHESIS_SYSTEM},
        {"role": "user", "content": prompts.synthesis_prompt(question, block.text, draft, stop_note)},
    ]
    est = model.estimate_prompt_tokens(messages)
    payload = {**routed.to_dict(), "prompt_tokens_est": est}
    try:
        if budget is not None:
            if final:
                budget.admit_answer(est)
            else:
                budget.admit(est)
        reply = model.complete(messages, tools=None, max_tokens=max_tokens, final=final, json_reply=True)
    except RlmError as exc:
        result = _fallback(draft, findings, exc.message)
        result.prompt_tokens_est, result.payload = est, payload
        return result
    except BudgetExceeded as exc:
        result = _fallback(draft, findings, exc.detail)
        result.prompt_tokens_est, result.payload = est, payload
        return result
    if _usable(reply.content):
        answer, explanation, cited = parse_answer(reply.content)
        offered = set(block.included)
        # The entries the prompt showed, by the ids rlm gave them: a citation is checked against
        # these, never against an id that a line of their text only claims.
        shown = {f.id: f.full or f.text for f in findings if f.id in offered}
        shown.update({f"O{k + 1}": o for k, o in enumerate(observations or []) if f"O{k + 1}" in offered})
        evidence = "\n".join(
            [question, draft or "", *(f.full or f.text for f in findings), *(observations or [])]
        )
        why = (
            unsupported(answer, list(dict.fromkeys(cited)), shown, f"{question}\n{draft or ''}", evidence)
            if answer and _usable(answer)
            else None
        )
        if why is None and answer and (turned := turned_over(answer, draft, question)):
            why = turned
        if why is None and answer and copied_code(answer, findings):
            why = "its answer was the code behind a finding, not what the code found, and was not used"
        if why is not None:
            result = _fallback(draft, findings, why)
            result.reply, result.prompt_tokens_est, result.payload = reply, est, payload
            return result
        if answer and _usable(answer):
            answer = kept_exact(answer, draft, _findings_text(findings, observations))
            stated, reason = _confidence(reply.content)
            grounding = ground(answer, _evidence_shown(block.shown, findings), question)
            confidence, reason = checked_confidence(stated, reason, grounding)
            return Synthesis(
                answer,
                "synthesis",
                confidence=confidence,
                confidence_reason=reason,
                stated_confidence=stated,
                grounding=grounding,
                reply=reply,
                prompt_tokens_est=est,
                explanation=explanation,
                citations=[c for c in dict.fromkeys(cited) if c in offered],
                unknown_citations=[c for c in dict.fromkeys(cited) if c not in offered],
                payload=payload,
            )
    result = _fallback(draft, findings, "the synthesis reply was empty")
    result.reply, result.prompt_tokens_est, result.payload = reply, est, payload
    return result
