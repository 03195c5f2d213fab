"""Generated protobuf modules for the Lance file and table formats.

Do not edit the *_pb2 files by hand: change protos/*.proto and run scripts/gen_protos.py.

Modules: file_pb2 (lance.file), file2_pb2 (lance.file.v2), encodings_v2_0_pb2
(lance.encodings), encodings_v2_1_pb2 (lance.encodings21), table_pb2, transaction_pb2 and
rowids_pb2 (lance.table); index_pb2 (lance.index.pb, vector index metadata).
"""
