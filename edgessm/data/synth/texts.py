"""What the synthetic voices say: the 35 keywords, an "unknown" word pool, and generated ASR sentences.

Transcripts are normalised: lower case, words of letters with apostrophes inside, digits spelled out as
words, single spaces. The text given to the TTS engine is the transcript plus final punctuation, so what
is spoken is exactly what is transcribed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgessm.data.labels import SC35_WORDS

from . import vocab as V

KEYWORDS: tuple[str, ...] = SC35_WORDS

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()  # fmt: skip
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL_SPECIAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                    "nine": "ninth", "twelve": "twelfth"}  # fmt: skip


def number_words(n: int) -> str:
    """Cardinal number in words (American style, no "and"), 0 <= n < 10**9: 4021 -> "four thousand twenty one"."""
    if not 0 <= n < 10**9:
        raise ValueError(f"number_words supports 0 <= n < 1e9, got {n}")
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for size, name in ((10**6, "million"), (1000, "thousand"), (100, "hundred")):
        if n >= size:
            head, rest = divmod(n, size)
            return f"{number_words(head)} {name}" + ("" if rest == 0 else " " + number_words(rest))
    raise AssertionError("unreachable")


def ordinal_words(n: int) -> str:
    """Ordinal in words: 1 -> "first", 22 -> "twenty second", 30 -> "thirtieth"."""
    words = number_words(n).split()
    last = words[-1]
    if last in _ORDINAL_SPECIAL:
        last = _ORDINAL_SPECIAL[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return " ".join([*words[:-1], last])


def digits_words(digits: str, oh: bool = False) -> str:
    """Read a digit string one digit at a time ("507" -> "five zero seven"; with ``oh``: "five oh seven")."""
    return " ".join("oh" if (oh and d == "0") else _ONES[int(d)] for d in digits)


def year_words(year: int) -> str:
    """How a year is said: 1984 -> "nineteen eighty four", 2007 -> "two thousand seven", 2021 -> "twenty twenty one"."""
    if 2000 <= year < 2010:
        return number_words(year)
    head, tail = divmod(year, 100)
    if tail == 0:
        return f"{number_words(head)} hundred"
    return f"{number_words(head)} " + (f"oh {_ONES[tail]}" if tail < 10 else number_words(tail))


_DIGIT_RE = re.compile(r"\d+")
_KEEP_RE = re.compile(r"[^a-z' ]+")


def normalize_transcript(text: str) -> str:
    """Lower case, numbers spelled out digit group by group, only letters, apostrophes and single spaces."""
    text = _DIGIT_RE.sub(lambda m: f" {number_words(int(m.group()))} ", text.lower().replace("’", "'"))
    text = _KEEP_RE.sub(" ", text.replace("-", " "))
    tokens = [t.strip("'") for t in text.split()]
    return " ".join(t for t in tokens if t)


def stable_unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts`` (sha256; independent of Python's hash seed)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def unknown_words() -> tuple[str, ...]:
    """The "unknown"-class pool: common words minus the 35 keywords, their homophones ("for", "to", "won",
    "ate", "know", "write", ...) and their simple inflections ("dogs", "stopped", "going"); sorted."""
    excluded = set(KEYWORDS) | set(V.KEYWORD_HOMOPHONES)
    for w in KEYWORDS:
        excluded |= {w + "s", w + "es", w + "ed", w + "ing", w + "'s", w + w[-1] + "ed", w + w[-1] + "ing"}
    return tuple(sorted({w for w in V.UNKNOWN_CANDIDATES if w not in excluded and " " not in w}))


# ---- sentences ----


@dataclass(frozen=True)
class Sentence:
    """One generated sentence: ``text`` is the normalised transcript, ``spoken`` what the engine is given."""

    text: str
    spoken: str
    domain: str


Slot = Callable[[np.random.Generator], str]


def _pick(options: tuple[str, ...] | list[str]) -> Slot:
    return lambda rng: options[int(rng.integers(len(options)))]


def _plural(animal: str) -> str:
    return V.ANIMAL_PLURALS.get(animal, animal + "s")


def _clock(rng: np.random.Generator, part_of_day: bool = True) -> str:
    h = int(rng.integers(1, 13))
    style = int(rng.integers(6))
    if style == 0:
        return f"{number_words(h)} o'clock"
    if style == 1:
        return f"half past {number_words(h)}"
    if style == 2:
        return f"quarter to {number_words(h)}"
    if style == 3:
        return f"quarter past {number_words(h)}"
    m = int(rng.choice([5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55]))
    if style == 4 or not part_of_day:
        return f"{number_words(h)} {'oh ' + number_words(m) if m < 10 else number_words(m)}"
    return f"{number_words(h)} {number_words(m)} in the {'morning' if rng.random() < 0.5 else 'evening'}"


def _duration(rng: np.random.Generator) -> str:
    unit = str(rng.choice(["seconds", "minutes", "minutes", "minutes", "hours"]))
    n = int(rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 25, 30, 40, 45, 90]))
    if unit == "hours":
        n = int(rng.integers(2, 6))
    if rng.random() < 0.1:
        return str(rng.choice(["one minute", "an hour", "half an hour", "an hour and a half", "one second"]))
    return f"{number_words(n)} {unit}"


def _phone(rng: np.random.Generator) -> str:
    n = int(rng.choice([4, 7, 7, 10]))
    return digits_words("".join(str(int(d)) for d in rng.integers(0, 10, n)), oh=bool(rng.random() < 0.3))


def _digits(lo: int, hi: int) -> Slot:
    return lambda rng: digits_words("".join(str(int(d)) for d in rng.integers(0, 10, int(rng.integers(lo, hi + 1)))))


def _number(lo: int, hi: int) -> Slot:
    return lambda rng: number_words(int(rng.integers(lo, hi + 1)))


def _money(rng: np.random.Generator) -> str:
    cur = str(rng.choice(V.CURRENCIES))
    whole = int(rng.choice([int(rng.integers(1, 20)), int(rng.integers(20, 200)), int(rng.integers(200, 5000))]))
    text = f"{number_words(whole)} {cur if whole != 1 else cur[:-1]}"
    if rng.random() < 0.35:
        cents = int(rng.integers(1, 100))
        text += f" and {number_words(cents)} {'cents' if cur != 'pounds' else 'pence'}"
    return text


def _date(rng: np.random.Generator) -> str:
    month = str(rng.choice(V.MONTHS))
    day = ordinal_words(int(rng.integers(1, 29)))
    return f"{month} {day}" if rng.random() < 0.5 else f"the {day} of {month}"


SLOTS: dict[str, Slot] = {
    "name": _pick(V.NAMES),
    "name2": _pick(V.NAMES),
    "relative": _pick(V.RELATIVES),
    "room": _pick(V.ROOMS),
    "device": _pick(V.DEVICES),
    "openable": _pick(V.OPENABLES),
    "lockable": _pick(V.LOCKABLES),
    "onoff": _pick(("on", "off")),
    "updown": _pick(("up", "down")),
    "food": _pick(V.FOODS),
    "food2": _pick(V.FOODS),
    "animal": _pick(V.ANIMALS),
    "animals": lambda rng: _plural(_pick(V.ANIMALS)(rng)),
    "object": _pick(V.OBJECTS),
    "furniture": _pick(V.FURNITURE),
    "place": _pick(V.PLACES),
    "shop": _pick(V.SHOPS),
    "city": _pick(V.CITIES),
    "city2": _pick(V.CITIES),
    "adj": _pick(V.ADJECTIVES),
    "color": _pick(V.COLORS),
    "weather_adj": _pick(V.WEATHER_ADJ),
    "weather_verb": _pick(V.WEATHER_VERBS),
    "activity": _pick(V.ACTIVITIES),
    "sport": _pick(V.SPORTS),
    "genre": _pick(V.GENRES),
    "media": _pick(V.MEDIA),
    "app": _pick(V.APPS),
    "event": _pick(V.EVENTS),
    "todo": _pick(V.TODOS),
    "message": _pick(V.MESSAGES),
    "day": _pick(V.DAYS),
    "when": _pick(V.WHEN),
    "past_when": _pick(V.PAST_WHEN),
    "adverb": _pick(V.ADVERBS),
    "direction": _pick(V.DIRECTIONS),
    "leftright": _pick(("left", "right")),
    "container": _pick(V.CONTAINERS),
    "unit": _pick(V.UNITS),
    "dist_unit": _pick(V.DISTANCE_UNITS),
    "food_verb": lambda rng: V.FOOD_VERBS[int(rng.integers(len(V.FOOD_VERBS)))][0],
    "food_verbed": lambda rng: V.FOOD_VERBS[int(rng.integers(len(V.FOOD_VERBS)))][1],
    "object_verb": lambda rng: V.OBJECT_VERBS[int(rng.integers(len(V.OBJECT_VERBS)))][0],
    "object_verbed": lambda rng: V.OBJECT_VERBS[int(rng.integers(len(V.OBJECT_VERBS)))][1],
    "person_verb": lambda rng: V.PERSON_VERBS[int(rng.integers(len(V.PERSON_VERBS)))][0],
    "person_verbed": lambda rng: V.PERSON_VERBS[int(rng.integers(len(V.PERSON_VERBS)))][1],
    "animal_verbed": lambda rng: V.ANIMAL_VERBS[int(rng.integers(len(V.ANIMAL_VERBS)))][1],
    "motion_verb": lambda rng: V.MOTION_VERBS[int(rng.integers(len(V.MOTION_VERBS)))][0],
    "motion_verbed": lambda rng: V.MOTION_VERBS[int(rng.integers(len(V.MOTION_VERBS)))][1],
    "clock": _clock,
    "clock_plain": lambda rng: _clock(rng, part_of_day=False),
    "duration": _duration,
    "phone": _phone,
    "pin": _digits(4, 4),
    "code": _digits(3, 8),
    "digit": _number(0, 9),
    "small": _number(2, 12),
    "number": _number(1, 99),
    "big": _number(100, 9999),
    "percent": lambda rng: number_words(int(rng.choice(range(5, 101, 5)))) + " percent",
    "temp": _number(55, 85),
    "volume": _number(1, 10),
    "money": _money,
    "year": lambda rng: year_words(int(rng.integers(1950, 2031))),
    "date": _date,
    "ordinal": lambda rng: ordinal_words(int(rng.integers(1, 32))),
    "subject": _pick(("i", "we", "they", "you", "my {relative}", "{name}", "our neighbors", "the kids")),
    "sentence_start": _pick(("", "please ", "hey ", "okay ", "can you ", "could you please ")),
    "readable": _pick(V.READABLES),
    "card": lambda rng: f"{_pick(V.CARD_RANKS)(rng)} of {_pick(V.CARD_SUITS)(rng)}",
}

# (domain, weight, templates). A trailing "?" marks a question; {slot} fills from SLOTS (recursively).
TEMPLATES: tuple[tuple[str, float, tuple[str, ...]], ...] = (
    ("home", 3.0, (
        "{sentence_start}turn {onoff} the {device}",
        "turn {onoff} the {device} in the {room}",
        "switch {onoff} the {room} {device}",
        "please turn the {device} {onoff}",
        "dim the lights in the {room}",
        "set the {room} lights to {percent}",
        "set the thermostat to {temp} degrees",
        "make it warmer in the {room}",
        "make it a bit cooler in here",
        "is the {device} in the {room} still on?",
        "lock the {lockable}",
        "open the {openable} in the {room}",
        "close the {openable}",
        "did i leave the {device} on?",
        "turn everything off in the {room}",
        "start the {device} at {clock}",
        "turn the heating up to {temp} degrees",
    )),
    ("media", 2.5, (
        "turn the volume {updown}",
        "turn it {updown} a little",
        "set the volume to {volume}",
        "{sentence_start}play some {genre}",
        "play {genre} in the {room}",
        "play {media}",
        "play the next song",
        "skip this song",
        "pause the music",
        "stop the music",
        "resume playback",
        "shuffle my {genre} songs",
        "what song is this?",
        "read me {readable}",
        "go back to the previous track",
        "play {genre} for {duration}",
        "turn {updown} the music in the {room}",
    )),
    ("games", 1.0, (
        "{card}",
        "the {card}",
        "i have the {card}",
        "{sentence_start}play the {card}",
        "is it the {card}?",
        "put the {card} on the {card}",
        "draw a card",
        "deal {small} cards",
        "shuffle the deck",
        "roll the dice",
        "i rolled a {digit}",
        "it's your turn",
        "move {number} spaces {direction}",
    )),
    ("phone", 2.5, (
        "call {name}",
        "call my {relative}",
        "call {phone}",
        "dial {phone}",
        "{sentence_start}call {name} on speaker",
        "send a message to {name} saying {message}",
        "text my {relative} {message}",
        "tell {name} {message}",
        "read my new messages",
        "did {name} call me?",
        "when did my {relative} last call?",
        "open {app}",
        "take a picture",
        "my phone number is {phone}",
        "the code is {code}",
        "my pin is {pin}",
        "press {digit} to continue",
        "enter {code}",
        "{phone}",
    )),
    ("time", 3.0, (
        "set a timer for {duration}",
        "{sentence_start}set an alarm for {clock}",
        "wake me up at {clock_plain} {when}",
        "remind me to {todo} {when}",
        "remind me to {todo} at {clock}",
        "cancel my {clock} alarm",
        "snooze the alarm for {small} minutes",
        "how much time is left on the timer?",
        "start a timer for the {food} for {duration}",
        "what time is it?",
        "what time is it in {city}?",
        "what's the date today?",
        "what day is {date}?",
        "stop the timer",
        "add {small} minutes to the timer",
    )),
    ("info", 2.0, (
        "what's the weather like {when}?",
        "will it {weather_verb} in {city} {when}?",
        "how cold is it outside?",
        "what's the temperature in {city}?",
        "do i need an umbrella {when}?",
        "is it going to be {weather_adj} {when}?",
        "how far is {city} from {city2}?",
        "when does the sun set {when}?",
        "how many {unit} are in {small} days?",
        "what is {number} plus {number}?",
        "what is {small} times {small}?",
        "convert {number} {dist_unit} to feet",
        "who won the {sport} game last night?",
        "how do you spell {animal}?",
        "what year was {name} born?",
        "tell me a joke",
    )),
    ("navigation", 2.0, (
        "take me to the {place}",
        "how long does it take to drive to the {place}?",
        "find the nearest {shop}",
        "navigate to {big} {name} street",
        "show me the way to {city}",
        "turn {leftright} at the next corner",
        "go straight for {number} {dist_unit}",
        "where is the closest {shop}?",
        "how much traffic is there on the way to work?",
        "avoid the highway",
        "go {direction} {small} steps",
        "move {direction} and then stop",
        "follow the road for {number} {dist_unit}",
    )),
    ("lists", 2.0, (
        "add {food} to my shopping list",
        "add {food} and {food2} to the list",
        "remove {food} from my list",
        "what's on my shopping list?",
        "order {small} {container} of {food}",
        "we are out of {food}",
        "buy {food} on the way home",
        "do we have any {food} left?",
        "put {food} on the list for {day}",
    )),
    ("calendar", 1.5, (
        "what's on my calendar {when}?",
        "schedule a {event} with {name} on {day} at {clock}",
        "move my {event} to {day}",
        "cancel the {event} {when}",
        "when is my next {event}?",
        "book a table for {small} at {clock}",
        "my {event} is on {date}",
        "remind me about the {event} {when}",
        "the {event} starts at {clock}",
    )),
    ("numbers", 1.5, (
        "it costs {money}",
        "that will be {money}",
        "i was born in {year}",
        "the meeting is on {date}",
        "room {big}",
        "the bus number is {number}",
        "it's on page {number}",
        "turn to channel {number}",
        "flight {digit} {digit} {digit} {digit} leaves at {clock}",
        "the score was {digit} to {digit}",
        "i need {number} {container} of {food}",
        "we counted {number} {animals} in the {place}",
        "it happened in {year}",
        "there are {number} people in the queue",
    )),
    ("everyday", 4.0, (
        "{subject} {food_verbed} the {food} {past_when}",
        "{name} {food_verbed} some {adj} {food}",
        "my {relative} {object_verbed} the {object} {past_when}",
        "i {object_verbed} my {object} at the {place}",
        "{subject} {motion_verbed} to the {place} {past_when}",
        "{subject} {person_verbed} {name} {past_when}",
        "{subject} {animal_verbed} a {adj} {animal} near the {place}",
        "the {animal} is sleeping in the {room}",
        "the {object} is on the {furniture}",
        "where did i put my {object}?",
        "can you help me find my {object}?",
        "have you seen my {color} {object}?",
        "i like {activity} on {day}s",
        "we will {motion_verb} to {city} {when}",
        "{name} is my {relative}",
        "it is {weather_adj} {when}",
        "it was very {weather_adj} {past_when}",
        "i have to {food_verb} the {food} before dinner",
        "please {object_verb} the {object}",
        "don't forget to {person_verb} {name}",
        "i'm {activity} in the {room} right now",
        "we {adverb} go {activity} on {day}s",
        "the {adj} {animal} {animal_verbed} a {animal}",
        "the {food} tastes {adj}",
        "my {object} is {color}",
        "{name} and {name2} went {activity} {past_when}",
        "are you going to the {place} {when}?",
        "i think the {object} is {adj}",
        "we should {motion_verb} to the {place} {when}",
        "{name} bought a {color} {object} for {money}",
        "let's play {sport} {when}",
        "i can't find the {object}",
        "the {place} opens at {clock}",
        "the {food} is in the fridge",
        "how was your day?",
        "what would you like for dinner?",
        "could you say that again?",
        "good morning {name}",
        "thank you very much",
        "see you {when}",
        "happy birthday {name}",
        "nice to meet you {name}",
        "yes please",
        "no thank you",
        "i'm sorry i'm late",
        "i'll be there in {duration}",
        "let's meet at the {place} at {clock}",
        "that sounds great",
        "i don't know",
        "what did you say?",
        "the {animal} ran {direction} the hill",
        "follow me to the {room}",
        "go {direction} and stop at the {place}",
        "the {object} fell off the {furniture}",
        "learn how to play {sport}",
        "the bird flew over the house",
        "our dog sat under the tree",
        "my cat is happy today",
        "wow that was {adj}",
        "sheila and marvin walked to the {place}",
    )),
)  # fmt: skip

_SLOT_RE = re.compile(r"\{(\w+)\}")
_ARTICLE_RE = re.compile(r"\ba (?=[aeio]|u(?!ni)|hour)")  # "a apple" -> "an apple" (not "a unit", "a uniform")


def _fill(template: str, rng: np.random.Generator, depth: int = 0) -> str:
    if depth > 4:
        raise ValueError(f"template slots nest too deeply: {template!r}")
    return _SLOT_RE.sub(lambda m: _fill(SLOTS[m.group(1)](rng), rng, depth + 1), template)


def generate_sentences(n: int, seed: int = 0) -> list[Sentence]:
    """``n`` distinct sentences (commands, digits, everyday phrases), the same list for the same seed.

    Domains are drawn with the weights of :data:`TEMPLATES`, then a template and its slots uniformly.
    """
    rng = np.random.default_rng([seed, 0x5E17])
    weights = np.array([w for _, w, _ in TEMPLATES], dtype=np.float64)
    weights /= weights.sum()
    out: list[Sentence] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise RuntimeError(f"could only generate {len(out)} distinct sentences of the {n} asked")
        domain, _, templates = TEMPLATES[int(rng.choice(len(TEMPLATES), p=weights))]
        template = templates[int(rng.integers(len(templates)))]
        question = template.endswith("?")
        text = _ARTICLE_RE.sub("an ", normalize_transcript(_fill(template.rstrip("?"), rng)))
        if not text or text in seen:
            continue
        seen.add(text)
        out.append(Sentence(text=text, spoken=text + ("?" if question else "."), domain=domain))
    return out


def vocabulary() -> set[str]:
    """Every word the sentence generator can produce: the sentence word lists of :mod:`vocab`, the templates'
    own words and number words (regular plurals such as "mondays" or "snails" come on top)."""
    skip = (V.UNKNOWN_CANDIDATES, V.KEYWORD_HOMOPHONES)
    found: set[str] = set()
    for value in vars(V).values():
        if any(value is s for s in skip):
            continue
        items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else ()
        for item in items:
            for entry in item if isinstance(item, tuple) else (item,):
                found |= set(normalize_transcript(entry).split()) if isinstance(entry, str) else set()
    for _, _, templates in TEMPLATES:
        for t in templates:
            found |= set(normalize_transcript(_SLOT_RE.sub(" ", t)).split())
    for i in range(1, 100):
        found |= set(number_words(i).split()) | set(ordinal_words(i).split())
    return found
