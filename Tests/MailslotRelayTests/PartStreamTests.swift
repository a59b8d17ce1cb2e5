import Foundation
import MailslotWire
import NIOCore
import Synchronization
import Testing
@testable import MailslotRelay
#if canImport(Glibc)
import Glibc
#endif

/// A part's body hashed and written on the blob pool (issue 27): every byte at its offset and in
/// the digest, whatever the buffers' sizes; a short, long or failing body refused; and no more
/// than two chunks taken from the body while the pool is busy (memory per transfer stays bounded).
@Suite struct PartStreamTests {
    /// A temporary file, open for writing, removed at the end.
    final class TemporaryFile {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("partstream-\(UUID().uuidString)").path
        let descriptor: CInt
        init() { descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        deinit {
            close(descriptor)
            unlink(path)
        }
        var contents: [UInt8] { FileManager.default.contents(atPath: path).map { [UInt8]($0) } ?? [] }
    }

    /// A body of the given pieces of the pattern (``PatternBody/bytes(_:)``), then, when
    /// `failing`, an error instead of its end.
    struct PiecesBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let pieces: [Int]
        var failing = false
        var asked: @Sendable (Int) -> Void = { _ in }

        struct AsyncIterator: AsyncIteratorProtocol {
            let body: PiecesBody
            var index = 0
            var given = 0

            mutating func next() async throws -> ByteBuffer? {
                body.asked(given)
                guard index < body.pieces.count else {
                    if body.failing { throw CancellationError() }
                    return nil
                }
                let count = body.pieces[index]
                index += 1
                defer { given += count }
                return ByteBuffer(bytes: PatternBody.bytes(given..<(given + count)))
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
    }

    @Test func everyByteGoesToItsOffsetAndIntoTheDigest() async throws {
        let pool = BlobIOPool(threads: 2, niceness: 5)
        let file = TemporaryFile()
        // Uneven pieces, empty ones among them, chunks ending mid-piece; more than 64 pieces a
        // chunk once (the most one pwritev takes).
        let pieces = [1, 0, 4095, 4097, 777, 0, 3] + Array(repeating: 13, count: 700) + Array(repeating: 1000, count: 30)
        let length = pieces.reduce(0, +)
        let stream = PartStream(pool: pool, chunkBytes: 8192)
        let digest = try await stream.write(PiecesBody(pieces: pieces), length: Int64(length), to: file.descriptor, at: 100)
        let expected = PatternBody.bytes(0..<length)
        #expect(digest == blake2b(expected, length: 32))
        let contents = file.contents
        #expect(contents.count == 100 + length)
        #expect(Array(contents.dropFirst(100)) == expected)
        #expect(contents.prefix(100).allSatisfy { $0 == 0 })
        try await pool.shutdown()
    }

    @Test func aShortALongAndAFailingBodyAreRefused() async throws {
        let pool = BlobIOPool(threads: 1, niceness: 5)
        let file = TemporaryFile()
        let stream = PartStream(pool: pool, chunkBytes: 4096)
        await #expect(throws: BlobStorageFailure.shortBody) {
            _ = try await stream.write(PiecesBody(pieces: [3000, 3000]), length: 6001, to: file.descriptor, at: 0)
        }
        await #expect(throws: BlobStorageFailure.failed("the body is longer than the part")) {
            _ = try await stream.write(PiecesBody(pieces: [3000, 3000]), length: 5999, to: file.descriptor, at: 0)
        }
        await #expect(throws: BlobStorageFailure.shortBody) {
            _ = try await stream.write(PiecesBody(pieces: [5000, 5000], failing: true), length: 20_000, to: file.descriptor, at: 0)
        }
        // A descriptor not open for writing: the write's own failure, not a short body.
        let reading = open(file.path, O_RDONLY | O_CLOEXEC)
        defer { close(reading) }
        await #expect(throws: BlobStorageFailure.failed("pwritev: errno \(EBADF)")) {
            _ = try await stream.write(PiecesBody(pieces: [5000, 5000]), length: 10_000, to: reading, at: 0)
        }
        try await pool.shutdown()
    }

    /// While the pool cannot write, the stream takes at most two chunks from the body (the one
    /// waiting for the pool and the one collected): the body's back-pressure, not a queue,
    /// absorbs a slow disk. The pool's only thread is held until the stream stops to wait for it
    /// (observed, no timer); a stream that queued every chunk would read the whole body
    /// meanwhile (the body lets the pool go once it has given more than two chunks, so that
    /// such a stream fails here rather than hangs).
    @Test func aBusyPoolStopsTheBodyAfterTwoChunks() async throws {
        let pool = BlobIOPool(threads: 1, niceness: 5)
        let file = TemporaryFile()
        let gate = DispatchSemaphore(value: 0)
        let gated = Task { try await pool.run { gate.wait() } }
        let open = Atomic<Bool>(false)
        let mostWhileClosed = Atomic<Int>(0)
        let chunk = 4096, piece = 1000
        let pieces = Array(repeating: piece, count: 100)
        let bound = 2 * (chunk + piece)
        @Sendable func openOnce() {
            if !open.exchange(true, ordering: .acquiringAndReleasing) { gate.signal() }
        }
        let body = PiecesBody(pieces: pieces) { given in
            guard !open.load(ordering: .acquiring) else { return }
            mostWhileClosed.max(given)
            if given > bound { openOnce() }
        }
        let waits = Atomic<Int>(0)
        let stream = PartStream(pool: pool, chunkBytes: chunk) {
            waits.add(1, ordering: .relaxed)
            openOnce()  // the stream stopped taking the body: the pool may go on
        }
        let digest = try await stream.write(body, length: Int64(piece * pieces.count), to: file.descriptor, at: 0)
        try await gated.value
        #expect(waits.load(ordering: .relaxed) >= 1, "the stream never waited for the pool")
        let most = mostWhileClosed.load(ordering: .relaxed)
        #expect(most >= chunk, "the stream should have collected while the pool was busy")
        #expect(most <= 2 * (chunk + piece), "\(most) bytes taken from the body while the pool could not write")
        let expected = PatternBody.bytes(0..<(piece * pieces.count))
        #expect(file.contents == expected)
        #expect(digest == blake2b(expected, length: 32))
        try await pool.shutdown()
    }
}

extension Atomic<Int> {
    /// Raises the value to `candidate` if it is larger.
    fileprivate func max(_ candidate: Int) {
        var current = load(ordering: .relaxed)
        while candidate > current {
            let (exchanged, original) = compareExchange(expected: current, desired: candidate, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}
