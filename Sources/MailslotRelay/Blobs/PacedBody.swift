import NIOCore

/// A part upload's body read at the pace of the relay's ``TransferBandwidth``: each buffer is
/// charged as it arrives and handed on at once; the next is asked for only once the bucket has
/// paid for it. While it waits, nothing more is read: the HTTP body's back-pressure stops reading
/// the socket, so the cap never holds more than the chunk in hand (``PartStream``'s bound stands).
struct PacedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer

    let base: Base
    let bandwidth: TransferBandwidth

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let bandwidth: TransferBandwidth
        /// When the bytes handed on so far are paid for: the next read waits for it.
        var resume: Int64?

        mutating func next() async throws -> ByteBuffer? {
            if let deadline = resume {
                resume = nil
                try await bandwidth.wait(until: deadline)
            }
            guard let buffer = try await base.next() else { return nil }
            resume = bandwidth.reserve(buffer.readableBytes)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), bandwidth: bandwidth)
    }
}
