"""The sans-IO MQTT core: bytes in, packets and events out. No sockets, no trio, no clock, no files.

Everything that speaks MQTT in this project (broker, clients, bridge, ``mqtt dump``, the Spark pipeline) goes
through the one codec and topic engine here.
"""

from .encoder import encode
from .errors import (
    LocalProtocolError,
    MalformedPacket,
    MQTTError,
    PacketTooLarge,
    ProtocolError,
    RemoteProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from .packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from .properties import EMPTY_PROPERTIES, Properties, PropertyId
from .reader import PacketReader, decode
from .reasons import ConnackReturnCode, ReasonCode, reason_name
from .topics import TopicTrie, matches, parse_shared, topic_filter_error, topic_name_error

__all__ = [
    "EMPTY_PROPERTIES",
    "Auth",
    "ConnAck",
    "ConnackReturnCode",
    "Connect",
    "Disconnect",
    "LocalProtocolError",
    "MQTTError",
    "MalformedPacket",
    "Packet",
    "PacketReader",
    "PacketTooLarge",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "PropertyId",
    "ProtocolError",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "RemoteProtocolError",
    "SubAck",
    "Subscribe",
    "Subscription",
    "TopicNameInvalid",
    "TopicTrie",
    "UnsubAck",
    "Unsubscribe",
    "UnsupportedProtocolVersion",
    "Will",
    "decode",
    "encode",
    "matches",
    "parse_shared",
    "reason_name",
    "topic_filter_error",
    "topic_name_error",
]
