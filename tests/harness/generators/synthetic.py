"""Deterministic, varied synthetic memories for the speed benchmark.

Text ``i`` depends only on ``i`` (its own seeded RNG), so the first n texts of a
larger dataset are the dataset of size n, and cached vectors can be sliced.
"""

from __future__ import annotations

import random

PEOPLE = [
    "the user",
    "Maria",
    "Tom",
    "Priya",
    "Kenji",
    "Amara",
    "Lukas",
    "Sofia",
    "Diego",
    "Hannah",
    "Omar",
    "Chen",
    "Fatima",
    "Noah",
    "Elena",
    "Ravi",
    "Grace",
    "Mateo",
    "Yuki",
    "Ingrid",
    "Kwame",
    "Zoe",
]
RELATIONS = [
    "sister",
    "manager",
    "dentist",
    "neighbour",
    "landlord",
    "coach",
    "teammate",
    "son",
    "daughter",
    "partner",
    "accountant",
    "mentor",
    "colleague",
    "friend from university",
    "piano teacher",
]
ACTIVITIES = [
    "went hiking in the Alps",
    "baked sourdough bread",
    "debugged a flaky integration test",
    "ran a half marathon",
    "planned a trip to Lisbon",
    "repaired the kitchen sink",
    "reviewed the quarterly budget",
    "adopted a rescue cat",
    "started learning Japanese",
    "migrated the database to PostgreSQL 18",
    "painted the spare bedroom",
    "watched a documentary about octopuses",
    "booked a flight to Nairobi",
    "cooked a vegetarian lasagne",
    "switched to a standing desk",
    "wrote a grant proposal",
    "visited the dermatologist",
    "bought a used road bike",
    "presented the roadmap to the board",
    "fixed a memory leak in the ingestion worker",
    "planted tomatoes",
    "renewed the passport",
    "joined a climbing gym",
    "refactored the billing service",
    "tried intermittent fasting",
    "organised a surprise birthday party",
    "set up a home NAS",
    "read a novel by Chimamanda Ngozi Adichie",
    "negotiated a lower internet bill",
    "learned to make ramen from scratch",
    "moved the standup to 9:30",
    "configured two-factor authentication",
    "lost the car keys again",
    "volunteered at the food bank",
]
PLACES = [
    "in Berlin",
    "at the office",
    "at home",
    "in the garden",
    "near the lake",
    "at the library",
    "in Kyoto",
    "at the coworking space",
    "on the train",
    "at the clinic",
    "in Toronto",
    "at the gym",
    "during the offsite",
    "at grandma's house",
    "in the mountains",
    "on a video call",
]
FEELINGS = [
    "felt relieved",
    "was frustrated",
    "was thrilled",
    "felt exhausted but proud",
    "was anxious",
    "found it surprisingly easy",
    "wants to do it again",
    "regretted it",
    "felt calm",
    "was bored",
]
TIMES = [
    "yesterday",
    "last weekend",
    "on Monday",
    "this morning",
    "two weeks ago",
    "in March",
    "last night",
    "over the holidays",
    "after lunch",
    "before the deadline",
]
ATTRIBUTES = {
    "favorite_food": ["spicy Thai curry", "pho", "margherita pizza", "falafel wraps", "sushi", "dal makhani"],
    "diet": ["vegetarian", "vegan", "lactose intolerant", "gluten free", "pescatarian", "no restrictions"],
    "allergy": ["peanuts", "shellfish", "penicillin", "pollen", "cats", "latex"],
    "timezone": ["Europe/Berlin", "America/Toronto", "Asia/Tokyo", "Africa/Nairobi", "UTC", "America/Lima"],
    "editor": ["Neovim", "VS Code", "Emacs", "JetBrains IDEA", "Helix", "Zed"],
    "language": ["Python", "Rust", "TypeScript", "Go", "Kotlin", "Elixir"],
    "hobby": ["bouldering", "chess", "birdwatching", "pottery", "salsa dancing", "woodworking"],
    "commute": ["bikes to work", "takes the tram", "works remotely", "drives", "walks", "takes the ferry"],
    "meeting_preference": ["mornings only", "no meetings on Fridays", "async updates", "short standups"],
    "coffee": ["oat flat white", "black filter coffee", "espresso", "decaf", "green tea instead", "cold brew"],
}
RULE_TEMPLATES = [
    "Always confirm {thing} before {action}.",
    "Never {action} without checking {thing}.",
    "When {person} asks about {thing}, answer briefly and link the docs.",
    "Prefer {thing} over ad-hoc scripts when {action}.",
    "Ask before {action} on weekends.",
    "Summarise {thing} in three bullet points before {action}.",
]
THINGS = [
    "the deployment checklist",
    "the user's calendar",
    "the allergy list",
    "the budget",
    "the test results",
    "the travel itinerary",
    "the migration plan",
    "the on-call rota",
    "the grocery list",
    "the contract terms",
]
ACTIONS = [
    "deploying to production",
    "booking travel",
    "ordering food",
    "sending invoices",
    "merging pull requests",
    "scheduling meetings",
    "changing passwords",
    "deleting files",
    "sharing documents",
    "renewing subscriptions",
]
BUTLERS = ["general", "health", "work", "home", "travel"]


def _pick(rng: random.Random, items: list[str]) -> str:
    return items[rng.randrange(len(items))]


def memory_spec(i: int) -> dict:
    """The i-th synthetic memory: kind, content and the kind's key fields."""
    rng = random.Random(7_000_003 * (i + 1))
    roll = rng.random()
    butler = _pick(rng, BUTLERS)
    if roll < 0.6:
        who = _pick(rng, PEOPLE)
        if rng.random() < 0.3:
            who = f"{who}'s {_pick(rng, RELATIONS)}"
        content = (
            f"{_pick(rng, TIMES).capitalize()} {who} {_pick(rng, ACTIVITIES)} {_pick(rng, PLACES)} "
            f"and {_pick(rng, FEELINGS)}."
        )
        if rng.random() < 0.4:
            content += f" Follow up with {_pick(rng, PEOPLE)} about {_pick(rng, THINGS)}."
        return {"kind": "episode", "content": content, "butler": butler, "importance": float(rng.randint(1, 9))}
    if roll < 0.9:
        attribute = _pick(rng, list(ATTRIBUTES))
        person = _pick(rng, PEOPLE)
        value = _pick(rng, ATTRIBUTES[attribute])
        content = f"{person.capitalize()} {attribute.replace('_', ' ')}: {value}."
        if rng.random() < 0.5:
            content += f" Mentioned {_pick(rng, TIMES)} {_pick(rng, PLACES)}."
        return {
            "kind": "fact",
            "content": content,
            "butler": butler,
            "subject": person,
            "predicate": f"{attribute}#{i}",  # unique key: bulk rows never supersede each other
            "importance": float(rng.randint(3, 9)),
        }
    content = _pick(rng, RULE_TEMPLATES).format(
        thing=_pick(rng, THINGS), action=_pick(rng, ACTIONS), person=_pick(rng, PEOPLE)
    )
    return {
        "kind": "rule",
        "content": content,
        "butler": butler,
        "importance": 5.0,
        "maturity": _pick(rng, ["candidate", "candidate", "established", "proven"]),
    }


def queries(n: int, seed: int = 11) -> list[str]:
    """Natural-language queries an agent would send against this data."""
    rng = random.Random(seed)
    forms = [
        lambda: f"what does {_pick(rng, PEOPLE)} like to eat",
        lambda: f"{_pick(rng, PEOPLE)} allergy",
        lambda: f"when did someone {_pick(rng, ACTIVITIES)}",
        lambda: f"rules about {_pick(rng, ACTIONS)}",
        lambda: f"which editor and programming language does {_pick(rng, PEOPLE)} use",
        lambda: f"trip {_pick(rng, PLACES)} {_pick(rng, TIMES)}",
        lambda: f"how does {_pick(rng, PEOPLE)} get to work",
        lambda: f"anything about {_pick(rng, THINGS)}",
    ]
    return [forms[rng.randrange(len(forms))]() for _ in range(n)]


def fresh_episode(i: int) -> str:
    """Texts for store benchmarks (never in the bulk set, so every store embeds new text)."""
    rng = random.Random(991 * (i + 17))
    return (
        f"Benchmark note {i}: {_pick(rng, PEOPLE)} {_pick(rng, ACTIVITIES)} {_pick(rng, PLACES)} "
        f"{_pick(rng, TIMES)} and {_pick(rng, FEELINGS)}."
    )


# Clauses that vary a reused text (the 1M dataset): each adds words of the same
# vocabulary, so the varied text stays close in meaning to the text whose vector
# it reuses (with a small perturbation), and the keyword statistics grow as a
# larger archive of similar notes would.
VARIATIONS = [
    lambda rng: f" Noted {_pick(rng, TIMES)}.",
    lambda rng: f" Mentioned again {_pick(rng, PLACES)}.",
    lambda rng: f" {_pick(rng, PEOPLE).capitalize()} brought it up {_pick(rng, TIMES)}.",
    lambda rng: f" Related to {_pick(rng, THINGS)}.",
    lambda rng: f" Reminder {_pick(rng, TIMES)} {_pick(rng, PLACES)}.",
    lambda rng: "",
]


def scaled_spec(i: int, base: int) -> dict:
    """Memory ``i`` of a dataset larger than ``base`` embedded texts: text ``i % base``
    with a varied clause appended (the text itself for ``i < base``), and its own
    unique fact key. Its vector is text ``i % base``'s, perturbed (bench/perf.py).
    No per-row token (such as the row number) is added: it would put one rare
    lexeme per memory into the tenant's term statistics, which no real archive has."""
    spec = memory_spec(i % base)
    if i < base:
        return spec
    rng = random.Random(5_000_011 * (i + 1))
    spec = dict(spec, content=spec["content"] + VARIATIONS[rng.randrange(len(VARIATIONS))](rng))
    if spec["kind"] == "fact":
        spec["predicate"] = spec["predicate"].split("#", 1)[0] + f"#{i}"
    return spec
