// A minimal protocol-buffers encoder (wire format only, no schema): enough
// to write the Perfetto TracePacket stream of `--trace` (events/perfetto_trace).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tdctl::events {

/// One message being encoded: fields are appended in call order. The bytes
/// are the message's wire encoding (no length prefix of its own).
class proto_message {
public:
    /// A varint field (wire type 0): uint32/uint64/int32/int64/bool/enum.
    /// A negative int32/int64 is passed as its two's complement (10 bytes).
    proto_message& varint(std::uint32_t field, std::uint64_t value);
    /// A 64-bit fixed field (wire type 1): fixed64.
    proto_message& fixed64(std::uint32_t field, std::uint64_t value);
    /// A double (wire type 1).
    proto_message& float64(std::uint32_t field, double value);
    /// A length-delimited field (wire type 2): string or bytes.
    proto_message& bytes(std::uint32_t field, std::string_view value);
    /// A nested message (wire type 2).
    proto_message& message(std::uint32_t field, const proto_message& nested)
    {
        return bytes(field, nested.data());
    }

    const std::string& data() const { return buf_; }
    std::size_t size() const { return buf_.size(); }

private:
    void tag(std::uint32_t field, unsigned wire_type);
    void raw_varint(std::uint64_t value);
    void raw_fixed64(std::uint64_t value);
    std::string buf_;
};

}  // namespace tdctl::events
