"""The inverted-index workload of the paper's experiments (section VI), as pure functions.

Text: a **synthetic, seeded** corpus, not real text. The vocabulary is made of pronounceable
pseudo-words (random consonant-vowel syllables, unique, seeded); word ``r`` of the vocabulary has
Zipf rank ``r + 1`` and is drawn with probability proportional to ``1 / (r + 1) ** exponent``
(numpy's seeded generator), so word frequencies follow Zipf's law by construction and the load
per word is skewed the way the paper's Wikipedia load is.

Pipeline (Figure 8) with 1 to 3 order-sensitive stages (:func:`inverted_index_stages`):

1. ``Map(split_document)``: a document ``(doc_id, text)`` becomes ``(word, doc_id, positions)``
   per distinct word, in order of first occurrence.
2. ``StatefulMap(update_postings, key=word)``: each word's posting list; emits the change log
   record ``("add", word, doc_id, positions, document_frequency)``.
3. (two stages) ``StatefulMap(df_milestones, key=word)``: emits ``(word, milestone, doc_id)``
   when a word's document frequency reaches a power of two.
4. (three stages) ``Grouping(window=2, key=milestone)``: pairs of words that reached the same
   milestone one after the other (re-keyed, so another shuffle).

Stages 2 and 3 are keyed by word, stage 4 by milestone. Stage 3 could be fused with stage 2
(same key); it is kept apart so that the number of order-sensitive stages is what varies.

Example
-------
>>> docs = generate_documents(3, vocabulary_size=50, words_per_doc=(4, 6), seed=1)
>>> len(docs), all(4 <= len(text.split()) <= 6 for _, text in docs)
(3, True)
>>> split_document((7, "to be or not to be"))
[('to', 7, (0, 4)), ('be', 7, (1, 5)), ('or', 7, (2,)), ('not', 7, (3,))]
"""

from __future__ import annotations

import numpy as np

from dataflow_kafka.optimistic.stages import Grouping, Map, Operation, StatefulMap
from dataflow_kafka.errors import InvalidArgumentError

__all__ = [
    "synthetic_vocabulary",
    "zipf_probabilities",
    "generate_documents",
    "document_arrivals",
    "split_document",
    "update_postings",
    "df_milestones",
    "inverted_index_stages",
    "inverted_index_same_key",
]

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"

Document = tuple[int, str]
Posting = tuple[str, int, tuple[int, ...]]


def synthetic_vocabulary(size: int, seed: int = 0) -> list[str]:
    """``size`` unique pseudo-words of 1 to 4 syllables; shorter words tend to get lower ranks."""
    if size < 1:
        raise InvalidArgumentError(f"vocabulary size must be >= 1, got {size!r}")
    rng = np.random.default_rng(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        syllables = 1 + min(3, len(words) * 4 // max(size, 1) + int(rng.integers(0, 2)))
        word = "".join(_CONSONANTS[rng.integers(len(_CONSONANTS))] + _VOWELS[rng.integers(len(_VOWELS))]
                       for _ in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_probabilities(size: int, exponent: float = 1.0) -> np.ndarray:
    """Probability of the word of rank ``r`` (1-based) proportional to ``r ** -exponent``."""
    if exponent <= 0:
        raise InvalidArgumentError(f"Zipf exponent must be > 0, got {exponent!r}")
    weights = np.arange(1, size + 1, dtype=float) ** -exponent
    return weights / weights.sum()


def generate_documents(
    n_docs: int,
    *,
    vocabulary_size: int = 10_000,
    words_per_doc: tuple[int, int] = (50, 150),
    exponent: float = 1.0,
    seed: int = 0,
) -> list[Document]:
    """``n_docs`` documents ``(doc_id, text)`` of Zipf-distributed synthetic words (seeded)."""
    low, high = words_per_doc
    if not 1 <= low <= high:
        raise InvalidArgumentError(f"words_per_doc must be (low, high) with 1 <= low <= high, got {words_per_doc!r}")
    vocabulary = synthetic_vocabulary(vocabulary_size, seed)
    p = zipf_probabilities(vocabulary_size, exponent)
    rng = np.random.default_rng(seed + 1)
    docs: list[Document] = []
    for doc_id in range(n_docs):
        ranks = rng.choice(vocabulary_size, size=int(rng.integers(low, high + 1)), p=p)
        docs.append((doc_id, " ".join(vocabulary[r] for r in ranks)))
    return docs


def document_arrivals(
    docs: list[Document], *, partitions: int = 4, mean_gap_ms: float = 10.0, seed: int = 0
) -> list[tuple[int, int, int, Document]]:
    """``(event_time_ms, partition, offset, doc)`` in event-time order, with exponential gaps
    rounded to whole milliseconds (so equal timestamps occur) and random partitions."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(np.rint(rng.exponential(mean_gap_ms, size=len(docs)))).astype(int)
    offsets = [0] * partitions
    out = []
    for t, doc in zip(times, docs):
        part = int(rng.integers(partitions))
        out.append((int(t), part, offsets[part], doc))
        offsets[part] += 1
    return out


def split_document(doc: Document) -> list[Posting]:
    """``(word, doc_id, positions)`` for each distinct word, in order of first occurrence."""
    doc_id, text = doc
    positions: dict[str, list[int]] = {}
    for i, word in enumerate(text.split()):
        positions.setdefault(word, []).append(i)
    return [(word, doc_id, tuple(ps)) for word, ps in positions.items()]


def _word(posting: Posting) -> str:
    return posting[0]


def update_postings(postings: tuple, posting: Posting) -> tuple[tuple, list[tuple]]:
    """Append a document to a word's posting list; emit the change log record."""
    word, doc_id, positions = posting
    postings = postings + ((doc_id, positions),)
    return postings, [("add", word, doc_id, positions, len(postings))]


def _word_of_change(change: tuple) -> str:
    return change[1]


def df_milestones(reached: int, change: tuple) -> tuple[int, list[tuple]]:
    """Per word: when its document frequency reaches a power of two, emit
    ``(word, milestone, doc_id)``. The output changes only at crossings, so a late document
    shifts at most the crossing it moves, not every later record."""
    df = change[4]
    milestone = 1 << (df.bit_length() - 1)
    if milestone > reached:
        return milestone, [(change[1], milestone, change[2])]
    return reached, []


def _milestone_of(record: tuple) -> int:
    return record[1]


def inverted_index_same_key(order_sensitive: int = 1) -> list[bool]:
    """Per link between consecutive order-sensitive stages of :func:`inverted_index_stages`,
    whether both are keyed by the same key (the word: postings, then milestones by word; the pairs
    stage is keyed by milestone), for ``fuse_same_key``."""
    return [True, False][:order_sensitive - 1]


def inverted_index_stages(order_sensitive: int = 1) -> list[Operation]:
    """The inverted-index pipeline with ``order_sensitive`` (1, 2 or 3) stateful stages."""
    if order_sensitive not in (1, 2, 3):
        raise InvalidArgumentError(f"order_sensitive must be 1, 2 or 3, got {order_sensitive!r}")
    stages: list[Operation] = [Map(split_document), StatefulMap(update_postings, key=_word, initial=())]
    if order_sensitive >= 2:
        stages.append(StatefulMap(df_milestones, key=_word_of_change, initial=0))
    if order_sensitive >= 3:
        stages.append(Grouping(window=2, key=_milestone_of))
    return stages
