#include "events/protobuf_writer.hpp"

#include <cstring>

namespace tdctl::events {

void proto_message::raw_varint(std::uint64_t value)
{
    while (value >= 0x80) {
        buf_.push_back(static_cast<char>((value & 0x7f) | 0x80));
        value >>= 7;
    }
    buf_.push_back(static_cast<char>(value));
}

void proto_message::raw_fixed64(std::uint64_t value)
{
    for (int i = 0; i < 8; ++i)
        buf_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void proto_message::tag(std::uint32_t field, unsigned wire_type)
{
    raw_varint((static_cast<std::uint64_t>(field) << 3) | wire_type);
}

proto_message& proto_message::varint(std::uint32_t field, std::uint64_t value)
{
    tag(field, 0);
    raw_varint(value);
    return *this;
}

proto_message& proto_message::fixed64(std::uint32_t field, std::uint64_t value)
{
    tag(field, 1);
    raw_fixed64(value);
    return *this;
}

proto_message& proto_message::float64(std::uint32_t field, double value)
{
    std::uint64_t bits = 0;
    static_assert(sizeof bits == sizeof value);
    std::memcpy(&bits, &value, sizeof bits);
    return fixed64(field, bits);
}

proto_message& proto_message::bytes(std::uint32_t field, std::string_view value)
{
    tag(field, 2);
    raw_varint(value.size());
    buf_.append(value);
    return *this;
}

}  // namespace tdctl::events
