"""The built-in training prompts of feature drafts: chat-like requests, seeded, without the held-out ones.

A feature draft learns the target's next token from the target's own answers, so what it is good
at is what it was trained on. The research prototype's pool was 75 % Python documentation, code
and licence text wrapped in instructions and reached 0.36 first-token acceptance on chat prompts;
this pool is what chat users send (prompt_bank.py's word lists): questions, how-tos, small code
tasks, rewrites and extractions over short sentences, creative requests. `recycled` also makes
summaries, rewrites and code explanations of the target's own earlier answers (copying, which text
tasks need); off by default (feature_data.DataSettings.recycle_every): their long prompts cost more
of a CPU's time than the answers they add bought on chat requests.

Requests on the held-out evaluation topics are filtered out (`HELD_OUT_TOPICS`), and `near_copies`
lets a caller check a pool against any prompt file.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence

from specdec.pipeline.draft import prompt_bank as bank

# Topics and requests of the held-out evaluation prompts (the 40 chat prompts acceptance was measured on
# and the SmolLM2 demo's 36): no training prompt may mention them, so acceptance measured there is held out.
HELD_OUT_TOPICS = (
    "palindrome", "vowel", "celsius", "fahrenheit", "haiku", "grandmother", "bakery", "crocodile", "alligator",
    "mortgage", "bike lane", "bicycle lane", "honey", "waggle", "boston", "berlin", "horror", "good morning",
    "percent of", "tallest mountain", "bones", "weather and climate", "reverse a list", "largest", "decline a meeting",
    "hiking trip", "sleeping better", "sleep better", "stairs", "elevator", "northern lights", "aurora", "mona lisa",
    "purr", "photosynthesis", "capital of france", "sky blue", "sky is blue", "leap year", "romeo", "states of matter",
    "rainbow", "largest planet", "even numbers", "each word appears", "list and a tuple", "learns to paint",
    "sunny morning", "order of the words", "email address", "book club", "blender", "maple street", "heating system",
    "quarterly sales", "dentist", "autumn leaves", "sql query", "for loop", "birthday message", "moving house",
    "helping me move", "past tense: \"she walks",
)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(("a", "an", "the", "of", "to", "in", "on", "and", "or", "for", "is", "are", "be", "it", "this",
                   "that", "with", "as", "at", "by", "from", "what", "how", "why", "who", "which", "do", "does",
                   "can", "you", "me", "my", "i", "your", "write", "give"))


def allowed(prompt: str) -> bool:
    """False for a prompt on a held-out topic."""
    text = prompt.lower()
    return not any(topic in text for topic in HELD_OUT_TOPICS)


def _content(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def near_copies(pool: Iterable[str], held_out: Sequence[str], threshold: float = 0.5) -> list[tuple[str, str]]:
    """(pool prompt, held-out prompt) pairs whose content words overlap by `threshold` or more
    (Jaccard): what would make held-out prompts training data. A shared request frame alone ("Rewrite
    this sentence so it sounds more polite:" over another sentence) stays below it."""
    targets = [(h, _content(h)) for h in held_out]
    found = []
    for prompt in pool:
        words = _content(prompt)
        for text, theirs in targets:
            union = words | theirs
            if union and len(words & theirs) / len(union) >= threshold:
                found.append((prompt, text))
    return found


def sentences(rng: random.Random, count: int) -> list[str]:
    """Short factual sentences with names, places, prices and dates, and sloppy ones to correct."""
    out = []
    for _ in range(count):
        if rng.random() < 0.25:
            out.append(rng.choice(bank.SLOPPY).format(e2=rng.choice(bank.EVENTS).removeprefix("a ")))
            continue
        names = rng.sample(bank.FIRST_NAMES, 2)
        out.append(rng.choice(bank.SENTENCE_TEMPLATES).format(
            n1=names[0], n2=names[1], l1=rng.choice(bank.LAST_NAMES), l2=rng.choice(bank.LAST_NAMES),
            c1=(cities := rng.sample(bank.CITIES, 3))[0], c2=cities[1], c3=cities[2], m=rng.choice(bank.MONTHS),
            d=rng.randint(1, 28), i1=(items := rng.sample(bank.ITEMS, 2))[0], i2=items[1],
            p1=f"{rng.randint(2, 80)}.{rng.choice((0, 25, 50, 75, 99)):02d}",
            p2=f"{rng.randint(2, 40)}.{rng.choice((0, 50, 99)):02d}", k1=rng.randint(2, 12), k2=rng.randint(13, 40),
            h=rng.randint(6, 21), mm=rng.choice(("00", "15", "30", "45"))))
    return out


def _topic_prompt(rng: random.Random) -> str:
    topic, other = rng.sample(bank.TOPICS, 2)
    return rng.choice(bank.TOPIC_TEMPLATES).format(t=topic, u=other)


def _howto_prompt(rng: random.Random) -> str:
    return rng.choice(bank.HOWTO_TEMPLATES).format(a=rng.choice(bank.ACTIVITIES))


def _code_prompt(rng: random.Random) -> str:
    if rng.random() < 0.25:
        x, y = rng.sample(bank.CODE_CONCEPTS, 2)
        return rng.choice(bank.CODE_QUESTIONS).format(x=x, y=y)
    return rng.choice(bank.CODE_TEMPLATES).format(lang=rng.choice(bank.LANGUAGES), task=rng.choice(bank.CODE_TASKS))


def _creative_prompt(rng: random.Random) -> str:
    return rng.choice(bank.CREATIVE_TEMPLATES).format(
        t=rng.choice(bank.TOPICS), p=rng.choice(bank.PRODUCTS), o=rng.choice(bank.OCCASIONS),
        e=rng.choice(bank.EVENTS), s=rng.choice(bank.SCENES))


def _sentence_prompt(rng: random.Random) -> str:
    templates = bank.REWRITE_TEMPLATES if rng.random() < 0.55 else bank.EXTRACT_TEMPLATES
    return rng.choice(templates).format(s=sentences(rng, 1)[0])


# Shares of the fresh prompts: what chat users ask most, as the held-out prompts mix them.
KINDS = ((_topic_prompt, 0.38), (_howto_prompt, 0.14), (_code_prompt, 0.2), (_sentence_prompt, 0.16),
         (_creative_prompt, 0.12))


def fresh(seed: int, count: int) -> list[str]:
    """`count` distinct allowed prompts, deterministic for `seed`."""
    rng = random.Random(seed)
    makers = [maker for maker, _ in KINDS]
    weights = [weight for _, weight in KINDS]
    seen: dict[str, None] = {}
    attempts = 0
    while len(seen) < count and attempts < count * 20:
        attempts += 1
        prompt = rng.choices(makers, weights)[0](rng)
        if allowed(prompt):
            seen.setdefault(prompt)
    return list(seen)


_CODE_BLOCK = re.compile(r"```[a-zA-Z+]*\n(.+?)```", re.S)


def recycled(answers: Sequence[str], seed: int, count: int, max_chars: int = 900) -> list[str]:
    """Text tasks over the target's own earlier answers: summaries, rewrites and extractions of the
    prose, explanations and reviews of the code blocks. Answers on held-out topics are skipped."""
    rng = random.Random(seed)
    usable = [a.strip() for a in answers if len(a.strip()) > 120 and allowed(a)]
    out: list[str] = []
    for _ in range(count if usable else 0):
        answer = rng.choice(usable)
        code = _CODE_BLOCK.findall(answer)
        if code and rng.random() < 0.6:
            block = max(code, key=len).strip()[:max_chars]
            out.append(rng.choice(bank.CODE_PASSAGE_TEMPLATES).format(p=block))
            continue
        prose = _CODE_BLOCK.sub("", answer).strip()
        if len(prose) > max_chars:  # a whole paragraph or sentence, not a cut word
            cut = prose[:max_chars]
            prose = cut[:max(cut.rfind("\n"), cut.rfind(". ") + 1)] or cut
        if len(prose) > 80:
            out.append(rng.choice(bank.PASSAGE_TEMPLATES).format(p=prose))
    return list(dict.fromkeys(out))
