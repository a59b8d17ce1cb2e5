import Synchronization

/// Bounds the reads of one mailbox in progress at once. A read holds up to a page of envelopes
/// (``RelayConfiguration/maxPageBytes``) until its client has taken the answer; without a
/// bound, an owner who never reads the answers could make the relay hold page after page.
final class ReadLimiter: Sendable {
    /// The most reads of one mailbox at once.
    let limit: Int
    private let reading = Mutex<[String: Int]>([:])

    init(limit: Int) { self.limit = limit }

    /// A read of `mailbox` may start: the permit ends it when it is released (deinitialised),
    /// which is when the answer that holds it has been written or dropped. Nil at the limit.
    func start(_ mailbox: String) -> Permit? {
        let started = reading.withLock { reading -> Bool in
            let count = reading[mailbox, default: 0]
            guard count < limit else { return false }
            reading[mailbox] = count + 1
            return true
        }
        return started ? Permit(limiter: self, mailbox: mailbox) : nil
    }

    /// The reads of `mailbox` in progress.
    func count(_ mailbox: String) -> Int { reading.withLock { $0[mailbox, default: 0] } }

    private func end(_ mailbox: String) {
        reading.withLock { reading in
            let count = reading[mailbox, default: 1] - 1
            reading[mailbox] = count > 0 ? count : nil
        }
    }

    /// One read in progress. Ends when the last reference to it goes: however the answer's
    /// writing ends (written, failed, never started), the read is counted out exactly once.
    final class Permit: Sendable {
        private let limiter: ReadLimiter
        private let mailbox: String

        fileprivate init(limiter: ReadLimiter, mailbox: String) {
            self.limiter = limiter
            self.mailbox = mailbox
        }

        deinit { limiter.end(mailbox) }
    }
}
