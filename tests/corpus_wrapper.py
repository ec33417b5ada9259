"""A corpus whose `records` a test replaces (a load that stops early, a node that dies mid-load);
everything else is the wrapped corpus's."""


class CorpusWrapper:
    corpus: object

    def __getattr__(self, item):
        if item == "corpus":  # not set yet (copy, pickle): no recursion
            raise AttributeError(item)
        return getattr(self.corpus, item)

    def __len__(self):
        return len(self.corpus)
