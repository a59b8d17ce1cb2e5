import Synchronization

/// Bounds the reads in progress: of one mailbox, and of the whole relay. A read holds up to a page
/// of envelopes (``RelayConfiguration/maxPageBytes``) until its client has taken the answer, and a
/// database connection while it runs; without a bound, an owner who never reads the answers could
/// make the relay hold page after page, and a few accounts reading at once could take every
/// connection of the pool and keep everyone else's requests waiting (spec/protocol.md §5.6).
///
/// The relay's bound is shared fairly: a mailbox with no read in progress may start one while
/// fewer than ``relayLimit`` reads are in progress, a mailbox that already has one only while
/// fewer than half of it are. So accounts that read hard can hold at most half of the relay's
/// reads between them (and each at most ``limit``), and the other half stays for mailboxes'
/// first reads: a bystander's read is refused only when that many mailboxes are being read at once.
final class ReadLimiter: Sendable {
    /// The most reads of one mailbox at once.
    let limit: Int
    /// The most reads on this relay at once.
    let relayLimit: Int
    private let reading = Mutex<(mailboxes: [String: Int], total: Int)>(([:], 0))

    /// Why a read may not start.
    enum Refusal: Error, Equatable {
        /// The mailbox has ``ReadLimiter/limit`` reads in progress.
        case mailbox
        /// The relay has as many reads in progress as this one may join.
        case relay
    }

    init(limit: Int, relayLimit: Int = .max) {
        self.limit = limit
        self.relayLimit = relayLimit
    }

    /// A read of `mailbox` may start: the permit ends it when it is released (deinitialised),
    /// which is when the answer that holds it has been written or dropped.
    func start(_ mailbox: String) -> Result<Permit, Refusal> {
        let refusal = reading.withLock { reading -> Refusal? in
            let count = reading.mailboxes[mailbox, default: 0]
            guard count < limit else { return .mailbox }
            // The second half of the relay's reads is kept for mailboxes' first reads.
            guard reading.total < (count == 0 ? relayLimit : relayLimit / 2) else { return .relay }
            reading.mailboxes[mailbox] = count + 1
            reading.total += 1
            return nil
        }
        if let refusal { return .failure(refusal) }
        return .success(Permit(limiter: self, mailbox: mailbox))
    }

    /// The reads of `mailbox` in progress.
    func count(_ mailbox: String) -> Int { reading.withLock { $0.mailboxes[mailbox, default: 0] } }

    /// The reads in progress on this relay.
    var total: Int { reading.withLock { $0.total } }

    private func end(_ mailbox: String) {
        reading.withLock { reading in
            let count = reading.mailboxes[mailbox, default: 1] - 1
            reading.mailboxes[mailbox] = count > 0 ? count : nil
            reading.total -= 1
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
