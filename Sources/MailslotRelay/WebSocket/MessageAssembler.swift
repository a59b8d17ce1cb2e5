import HummingbirdWebSocket
import NIOCore
import NIOWebSocket

/// Puts a client's WebSocket frames together into messages, bounded in bytes and in fragments.
///
/// The WebSocket library's own assembly keeps every fragment and checks only their byte total:
/// a text frame followed by millions of empty continuation frames grew the relay by a gigabyte.
/// Here a message is one buffer, appended to; a message over `maxBytes` or `maxFragments`, and
/// an empty fragment that is not the last, end the socket with the close code the violation has.
struct MessageAssembler {
    /// A whole message.
    enum Message: Equatable {
        case text(String)
        /// Binary messages mean nothing to the relay; only that one came is kept.
        case binary
    }

    /// Why the socket is closed.
    enum Violation: Error, Equatable {
        /// More bytes than `maxBytes` (close 1009).
        case tooLarge
        /// More fragments than `maxFragments` (close 1009).
        case tooManyFragments
        /// An empty fragment that is not the last one: nothing but a cost to the relay (close 1008).
        case emptyFragment
        /// A continuation with no message begun, or a new message before the last one ended (close 1002).
        case outOfSequence

        /// The close code the socket ends with (RFC 6455 §7.4.1).
        var closeCode: WebSocketErrorCode {
            switch self {
            case .tooLarge, .tooManyFragments: .messageTooLarge
            case .emptyFragment: .policyViolation
            case .outOfSequence: .protocolError
            }
        }

        /// The reason given with the close.
        var reason: String {
            switch self {
            case .tooLarge: "message too large"
            case .tooManyFragments: "message in too many fragments"
            case .emptyFragment: "empty fragment"
            case .outOfSequence: "fragments out of sequence"
            }
        }
    }

    let maxBytes: Int
    let maxFragments: Int
    private var opcode: WebSocketDataFrame.Opcode?
    private var buffer = ByteBuffer()
    private var fragments = 0

    /// An assembler for messages of at most `maxBytes` in at most `maxFragments` frames.
    init(maxBytes: Int, maxFragments: Int) {
        self.maxBytes = maxBytes
        self.maxFragments = maxFragments
    }

    /// Takes the next data frame; the message it completes, if it does.
    mutating func add(_ frame: WebSocketDataFrame) throws(Violation) -> Message? {
        try add(opcode: frame.opcode, data: frame.data, fin: frame.fin)
    }

    /// Takes the next data frame, by its parts.
    mutating func add(opcode frameOpcode: WebSocketDataFrame.Opcode, data: ByteBuffer, fin: Bool) throws(Violation) -> Message? {
        let frame = (opcode: frameOpcode, data: data, fin: fin)
        switch (frame.opcode, opcode) {
        case (.continuation, nil), (.text, .some), (.binary, .some): throw .outOfSequence
        case (.continuation, .some): break
        default:
            opcode = frame.opcode
            buffer.clear()
            fragments = 0
        }
        fragments += 1
        guard frame.fin || frame.data.readableBytes > 0 else { throw .emptyFragment }
        guard fragments <= maxFragments else { throw .tooManyFragments }
        guard buffer.readableBytes + frame.data.readableBytes <= maxBytes else { throw .tooLarge }
        guard frame.fin else {
            var data = frame.data
            buffer.writeBuffer(&data)
            return nil
        }
        let kind = opcode
        opcode = nil
        // A message in one frame (the common case) is read where it lies, without a copy.
        let whole: ByteBuffer
        if fragments == 1 {
            whole = frame.data
        } else {
            var data = frame.data
            buffer.writeBuffer(&data)
            whole = buffer
            buffer = ByteBuffer()  // a large message's storage is not kept for the next one
        }
        return kind == .text ? .text(String(buffer: whole)) : .binary
    }
}
