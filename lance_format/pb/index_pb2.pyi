from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("data_type", "shape", "data")
    class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BFLOAT16: _ClassVar[Tensor.DataType]
        FLOAT16: _ClassVar[Tensor.DataType]
        FLOAT32: _ClassVar[Tensor.DataType]
        FLOAT64: _ClassVar[Tensor.DataType]
        UINT8: _ClassVar[Tensor.DataType]
        UINT16: _ClassVar[Tensor.DataType]
        UINT32: _ClassVar[Tensor.DataType]
        UINT64: _ClassVar[Tensor.DataType]
    BFLOAT16: Tensor.DataType
    FLOAT16: Tensor.DataType
    FLOAT32: Tensor.DataType
    FLOAT64: Tensor.DataType
    UINT8: Tensor.DataType
    UINT16: Tensor.DataType
    UINT32: Tensor.DataType
    UINT64: Tensor.DataType
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    data_type: Tensor.DataType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, data_type: _Optional[_Union[Tensor.DataType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class IVF(_message.Message):
    __slots__ = ("centroids", "offsets", "lengths", "centroids_tensor", "loss")
    CENTROIDS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    CENTROIDS_TENSOR_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    centroids: _containers.RepeatedScalarFieldContainer[float]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    lengths: _containers.RepeatedScalarFieldContainer[int]
    centroids_tensor: Tensor
    loss: float
    def __init__(self, centroids: _Optional[_Iterable[float]] = ..., offsets: _Optional[_Iterable[int]] = ..., lengths: _Optional[_Iterable[int]] = ..., centroids_tensor: _Optional[_Union[Tensor, _Mapping]] = ..., loss: _Optional[float] = ...) -> None: ...

class PQ(_message.Message):
    __slots__ = ("num_bits", "num_sub_vectors", "dimension", "codebook", "codebook_tensor")
    NUM_BITS_FIELD_NUMBER: _ClassVar[int]
    NUM_SUB_VECTORS_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CODEBOOK_FIELD_NUMBER: _ClassVar[int]
    CODEBOOK_TENSOR_FIELD_NUMBER: _ClassVar[int]
    num_bits: int
    num_sub_vectors: int
    dimension: int
    codebook: _containers.RepeatedScalarFieldContainer[float]
    codebook_tensor: Tensor
    def __init__(self, num_bits: _Optional[int] = ..., num_sub_vectors: _Optional[int] = ..., dimension: _Optional[int] = ..., codebook: _Optional[_Iterable[float]] = ..., codebook_tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
