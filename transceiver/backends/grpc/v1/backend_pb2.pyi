from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENCODING_UNSPECIFIED: _ClassVar[Encoding]
    ENCODING_PCM16: _ClassVar[Encoding]
    ENCODING_OPUS: _ClassVar[Encoding]
ENCODING_UNSPECIFIED: Encoding
ENCODING_PCM16: Encoding
ENCODING_OPUS: Encoding

class ToBackend(_message.Message):
    __slots__ = ("start", "pcm16", "opus", "event", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    OPUS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: SessionStart
    pcm16: Pcm16
    opus: OpusPacket
    event: Event
    end: SessionEnd
    def __init__(self, start: _Optional[_Union[SessionStart, _Mapping]] = ..., pcm16: _Optional[_Union[Pcm16, _Mapping]] = ..., opus: _Optional[_Union[OpusPacket, _Mapping]] = ..., event: _Optional[_Union[Event, _Mapping]] = ..., end: _Optional[_Union[SessionEnd, _Mapping]] = ...) -> None: ...

class FromBackend(_message.Message):
    __slots__ = ("accept", "pcm16", "opus", "event", "clear", "hangup")
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    OPUS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    HANGUP_FIELD_NUMBER: _ClassVar[int]
    accept: SessionAccept
    pcm16: Pcm16
    opus: OpusPacket
    event: Event
    clear: AudioClear
    hangup: Hangup
    def __init__(self, accept: _Optional[_Union[SessionAccept, _Mapping]] = ..., pcm16: _Optional[_Union[Pcm16, _Mapping]] = ..., opus: _Optional[_Union[OpusPacket, _Mapping]] = ..., event: _Optional[_Union[Event, _Mapping]] = ..., clear: _Optional[_Union[AudioClear, _Mapping]] = ..., hangup: _Optional[_Union[Hangup, _Mapping]] = ...) -> None: ...

class SessionStart(_message.Message):
    __slots__ = ("session_id", "transceiver_id", "remote", "metadata", "resumed", "offered")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSCEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    transceiver_id: int
    remote: str
    metadata: _containers.ScalarMap[str, str]
    resumed: bool
    offered: _containers.RepeatedCompositeFieldContainer[AudioFormat]
    def __init__(self, session_id: _Optional[str] = ..., transceiver_id: _Optional[int] = ..., remote: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., resumed: _Optional[bool] = ..., offered: _Optional[_Iterable[_Union[AudioFormat, _Mapping]]] = ...) -> None: ...

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate")
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    encoding: Encoding
    sample_rate: int
    def __init__(self, encoding: _Optional[_Union[Encoding, str]] = ..., sample_rate: _Optional[int] = ...) -> None: ...

class SessionAccept(_message.Message):
    __slots__ = ("audio",)
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    audio: AudioFormat
    def __init__(self, audio: _Optional[_Union[AudioFormat, _Mapping]] = ...) -> None: ...

class Pcm16(_message.Message):
    __slots__ = ("pcm",)
    PCM_FIELD_NUMBER: _ClassVar[int]
    pcm: bytes
    def __init__(self, pcm: _Optional[bytes] = ...) -> None: ...

class OpusPacket(_message.Message):
    __slots__ = ("payload", "sequence", "timestamp")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    sequence: int
    timestamp: int
    def __init__(self, payload: _Optional[bytes] = ..., sequence: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class AudioClear(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Hangup(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SessionEnd(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...
