import datetime

from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import file_pb2 as _file_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UUID(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: bytes
    def __init__(self, uuid: _Optional[bytes] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("fields", "fragments", "version", "version_aux_data", "schema_metadata", "index_section", "timestamp", "tag", "reader_feature_flags", "writer_feature_flags", "max_fragment_id", "transaction_file", "writer_version", "next_row_id", "data_format", "config", "base_paths", "table_metadata", "branch", "transaction_section_v1", "transaction_section")
    class SchemaMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class WriterVersion(_message.Message):
        __slots__ = ("library", "version", "prerelease", "build_metadata")
        LIBRARY_FIELD_NUMBER: _ClassVar[int]
        VERSION_FIELD_NUMBER: _ClassVar[int]
        PRERELEASE_FIELD_NUMBER: _ClassVar[int]
        BUILD_METADATA_FIELD_NUMBER: _ClassVar[int]
        library: str
        version: str
        prerelease: str
        build_metadata: str
        def __init__(self, library: _Optional[str] = ..., version: _Optional[str] = ..., prerelease: _Optional[str] = ..., build_metadata: _Optional[str] = ...) -> None: ...
    class DataStorageFormat(_message.Message):
        __slots__ = ("file_format", "version")
        FILE_FORMAT_FIELD_NUMBER: _ClassVar[int]
        VERSION_FIELD_NUMBER: _ClassVar[int]
        file_format: str
        version: str
        def __init__(self, file_format: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class TableMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_AUX_DATA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_METADATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_SECTION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    READER_FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    WRITER_FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FILE_FIELD_NUMBER: _ClassVar[int]
    WRITER_VERSION_FIELD_NUMBER: _ClassVar[int]
    NEXT_ROW_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FORMAT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    BASE_PATHS_FIELD_NUMBER: _ClassVar[int]
    TABLE_METADATA_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_SECTION_V1_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_SECTION_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.RepeatedCompositeFieldContainer[_file_pb2.Field]
    fragments: _containers.RepeatedCompositeFieldContainer[DataFragment]
    version: int
    version_aux_data: int
    schema_metadata: _containers.ScalarMap[str, bytes]
    index_section: int
    timestamp: _timestamp_pb2.Timestamp
    tag: str
    reader_feature_flags: int
    writer_feature_flags: int
    max_fragment_id: int
    transaction_file: str
    writer_version: Manifest.WriterVersion
    next_row_id: int
    data_format: Manifest.DataStorageFormat
    config: _containers.ScalarMap[str, str]
    base_paths: _containers.RepeatedCompositeFieldContainer[BasePath]
    table_metadata: _containers.ScalarMap[str, str]
    branch: str
    transaction_section_v1: int
    transaction_section: int
    def __init__(self, fields: _Optional[_Iterable[_Union[_file_pb2.Field, _Mapping]]] = ..., fragments: _Optional[_Iterable[_Union[DataFragment, _Mapping]]] = ..., version: _Optional[int] = ..., version_aux_data: _Optional[int] = ..., schema_metadata: _Optional[_Mapping[str, bytes]] = ..., index_section: _Optional[int] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tag: _Optional[str] = ..., reader_feature_flags: _Optional[int] = ..., writer_feature_flags: _Optional[int] = ..., max_fragment_id: _Optional[int] = ..., transaction_file: _Optional[str] = ..., writer_version: _Optional[_Union[Manifest.WriterVersion, _Mapping]] = ..., next_row_id: _Optional[int] = ..., data_format: _Optional[_Union[Manifest.DataStorageFormat, _Mapping]] = ..., config: _Optional[_Mapping[str, str]] = ..., base_paths: _Optional[_Iterable[_Union[BasePath, _Mapping]]] = ..., table_metadata: _Optional[_Mapping[str, str]] = ..., branch: _Optional[str] = ..., transaction_section_v1: _Optional[int] = ..., transaction_section: _Optional[int] = ...) -> None: ...

class BasePath(_message.Message):
    __slots__ = ("id", "name", "is_dataset_root", "path")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_DATASET_ROOT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    is_dataset_root: bool
    path: str
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., is_dataset_root: _Optional[bool] = ..., path: _Optional[str] = ...) -> None: ...

class VersionAuxData(_message.Message):
    __slots__ = ("metadata",)
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.ScalarMap[str, bytes]
    def __init__(self, metadata: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class IndexMetadata(_message.Message):
    __slots__ = ("uuid", "fields", "name", "dataset_version", "fragment_bitmap", "index_details", "index_version", "created_at", "base_id")
    UUID_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_BITMAP_FIELD_NUMBER: _ClassVar[int]
    INDEX_DETAILS_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    BASE_ID_FIELD_NUMBER: _ClassVar[int]
    uuid: UUID
    fields: _containers.RepeatedScalarFieldContainer[int]
    name: str
    dataset_version: int
    fragment_bitmap: bytes
    index_details: _any_pb2.Any
    index_version: int
    created_at: int
    base_id: int
    def __init__(self, uuid: _Optional[_Union[UUID, _Mapping]] = ..., fields: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ..., dataset_version: _Optional[int] = ..., fragment_bitmap: _Optional[bytes] = ..., index_details: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., index_version: _Optional[int] = ..., created_at: _Optional[int] = ..., base_id: _Optional[int] = ...) -> None: ...

class IndexSection(_message.Message):
    __slots__ = ("indices",)
    INDICES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedCompositeFieldContainer[IndexMetadata]
    def __init__(self, indices: _Optional[_Iterable[_Union[IndexMetadata, _Mapping]]] = ...) -> None: ...

class DataFragment(_message.Message):
    __slots__ = ("id", "files", "deletion_file", "physical_rows", "inline_row_ids", "external_row_ids", "inline_last_updated_at_versions", "external_last_updated_at_versions", "inline_created_at_versions", "external_created_at_versions")
    ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DELETION_FILE_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    INLINE_ROW_IDS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ROW_IDS_FIELD_NUMBER: _ClassVar[int]
    INLINE_LAST_UPDATED_AT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_LAST_UPDATED_AT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    INLINE_CREATED_AT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_CREATED_AT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    id: int
    files: _containers.RepeatedCompositeFieldContainer[DataFile]
    deletion_file: DeletionFile
    physical_rows: int
    inline_row_ids: bytes
    external_row_ids: ExternalFile
    inline_last_updated_at_versions: bytes
    external_last_updated_at_versions: ExternalFile
    inline_created_at_versions: bytes
    external_created_at_versions: ExternalFile
    def __init__(self, id: _Optional[int] = ..., files: _Optional[_Iterable[_Union[DataFile, _Mapping]]] = ..., deletion_file: _Optional[_Union[DeletionFile, _Mapping]] = ..., physical_rows: _Optional[int] = ..., inline_row_ids: _Optional[bytes] = ..., external_row_ids: _Optional[_Union[ExternalFile, _Mapping]] = ..., inline_last_updated_at_versions: _Optional[bytes] = ..., external_last_updated_at_versions: _Optional[_Union[ExternalFile, _Mapping]] = ..., inline_created_at_versions: _Optional[bytes] = ..., external_created_at_versions: _Optional[_Union[ExternalFile, _Mapping]] = ...) -> None: ...

class DataFile(_message.Message):
    __slots__ = ("path", "fields", "column_indices", "file_major_version", "file_minor_version", "file_size_bytes", "base_id")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    COLUMN_INDICES_FIELD_NUMBER: _ClassVar[int]
    FILE_MAJOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    FILE_MINOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASE_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    fields: _containers.RepeatedScalarFieldContainer[int]
    column_indices: _containers.RepeatedScalarFieldContainer[int]
    file_major_version: int
    file_minor_version: int
    file_size_bytes: int
    base_id: int
    def __init__(self, path: _Optional[str] = ..., fields: _Optional[_Iterable[int]] = ..., column_indices: _Optional[_Iterable[int]] = ..., file_major_version: _Optional[int] = ..., file_minor_version: _Optional[int] = ..., file_size_bytes: _Optional[int] = ..., base_id: _Optional[int] = ...) -> None: ...

class DeletionFile(_message.Message):
    __slots__ = ("file_type", "read_version", "id", "num_deleted_rows", "base_id")
    class DeletionFileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ARROW_ARRAY: _ClassVar[DeletionFile.DeletionFileType]
        BITMAP: _ClassVar[DeletionFile.DeletionFileType]
    ARROW_ARRAY: DeletionFile.DeletionFileType
    BITMAP: DeletionFile.DeletionFileType
    FILE_TYPE_FIELD_NUMBER: _ClassVar[int]
    READ_VERSION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NUM_DELETED_ROWS_FIELD_NUMBER: _ClassVar[int]
    BASE_ID_FIELD_NUMBER: _ClassVar[int]
    file_type: DeletionFile.DeletionFileType
    read_version: int
    id: int
    num_deleted_rows: int
    base_id: int
    def __init__(self, file_type: _Optional[_Union[DeletionFile.DeletionFileType, str]] = ..., read_version: _Optional[int] = ..., id: _Optional[int] = ..., num_deleted_rows: _Optional[int] = ..., base_id: _Optional[int] = ...) -> None: ...

class ExternalFile(_message.Message):
    __slots__ = ("path", "offset", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset: int
    size: int
    def __init__(self, path: _Optional[str] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...
