"""The Lance table format: datasets made of versioned manifests, fragments and transactions.

One concept per module, in the spirit of pyiceberg: paths and version naming, the manifest,
deletion files, row-id sequences, transactions, conflict checks, the commit protocol,
fragments, the scanner and the public :class:`Dataset` are kept apart.
"""
