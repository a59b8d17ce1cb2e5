import NIOCore

/// A part upload's body read at the pace of the relay's ``TransferBandwidth``: buffers are handed
/// on at once and charged in runs of ``TransferBandwidth/chargeBytes``; once a run is charged, the
/// next buffer is asked for only when the bucket has paid for it (and the part ends only when its
/// last bytes are paid). While it waits, nothing more is read: the HTTP body's back-pressure stops
/// reading the socket, so the cap never holds more than the chunk in hand (``PartStream``'s bound
/// stands).
struct PacedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer

    let base: Base
    let bandwidth: TransferBandwidth

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let bandwidth: TransferBandwidth
        /// Bytes handed on and not yet charged: fewer than ``TransferBandwidth/chargeBytes``.
        var owed = 0

        mutating func next() async throws -> ByteBuffer? {
            guard let buffer = try await base.next() else {
                // The rest is paid before the part is answered, so the next part's bytes queue behind it.
                let rest = owed
                owed = 0
                try await bandwidth.pace(rest)
                return nil
            }
            owed += buffer.readableBytes
            if owed >= bandwidth.chargeBytes {
                let charged = owed
                owed = 0
                // Paid before this buffer is handed on: the wait comes before the socket is read again.
                try await bandwidth.pace(charged)
            }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), bandwidth: bandwidth)
    }
}
