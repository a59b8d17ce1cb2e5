import Synchronization

/// Bounds the blob transfers in progress for one uid on this relay: part uploads and downloads
/// together (spec/protocol.md §4.17, `429 too_many_transfers`). A transfer holds a socket, a
/// part's worth of buffers and, for an upload, a file descriptor and a thread of the blocking
/// pool now and then; without a bound one account could open thousands at once. The same part
/// of a blob uploaded twice at once is refused too: the second would write the same bytes over
/// the first while the first is hashing them.
final class TransferLimiter: Sendable {
    /// The most transfers of one uid at once.
    let limit: Int
    private let state = Mutex<(uids: [String: Int], parts: Set<PartKey>)>(([:], []))

    /// A part of a blob being uploaded.
    struct PartKey: Hashable, Sendable {
        let blob: String
        let number: Int
    }

    /// Why a transfer may not start.
    enum Refusal: Error, Equatable {
        /// The uid has ``TransferLimiter/limit`` transfers in progress.
        case uid
        /// This part of this blob is being uploaded by another request.
        case part
    }

    init(limit: Int) {
        self.limit = limit
    }

    /// A transfer of `uid` may start, and when `part` is given, an upload of that part: the
    /// permit ends it when released (deinitialised), however the transfer ended.
    func start(_ uid: String, part: PartKey? = nil) -> Result<Permit, Refusal> {
        let refusal = state.withLock { state -> Refusal? in
            let count = state.uids[uid, default: 0]
            guard count < limit else { return .uid }
            if let part {
                guard !state.parts.contains(part) else { return .part }
                state.parts.insert(part)
            }
            state.uids[uid] = count + 1
            return nil
        }
        if let refusal { return .failure(refusal) }
        return .success(Permit(limiter: self, uid: uid, part: part))
    }

    /// The transfers of `uid` in progress.
    func count(_ uid: String) -> Int { state.withLock { $0.uids[uid, default: 0] } }

    private func end(_ uid: String, part: PartKey?) {
        state.withLock { state in
            let count = state.uids[uid, default: 1] - 1
            state.uids[uid] = count > 0 ? count : nil
            if let part { state.parts.remove(part) }
        }
    }

    /// One transfer in progress. Ends when the last reference to it goes: counted out exactly once.
    final class Permit: Sendable {
        private let limiter: TransferLimiter
        private let uid: String
        private let part: PartKey?

        fileprivate init(limiter: TransferLimiter, uid: String, part: PartKey?) {
            self.limiter = limiter
            self.uid = uid
            self.part = part
        }

        deinit { limiter.end(uid, part: part) }
    }
}
