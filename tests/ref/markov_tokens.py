"""markov_tokens.py — the token stream of titan's reference tests
(make_golden.py's golden batches, loss_curve.py's GPU curve): an order-1
Markov chain where each id has 3 likely successors (80%), otherwise
uniform, so a model has some structure to learn.  Python's random.Random,
independent of torch: the same ids on any machine."""

import random


def markov_tokens(n, vocab, seed):
    """Yields n token ids < vocab."""
    rng = random.Random(seed)
    succ = [[rng.randrange(vocab) for _ in range(3)] for _ in range(vocab)]
    x = rng.randrange(vocab)
    for _ in range(n):
        yield x
        x = rng.choice(succ[x]) if rng.random() < 0.8 else rng.randrange(vocab)
