import Foundation
import MailslotWire

/// Everything an operator can set. `mailslot-relay serve` fills it from flags and `MAILSLOT_*`
/// variables; the defaults are those of spec/protocol.md §11.
public struct RelayConfiguration: Sendable {
    /// Where to listen.
    public var host = "127.0.0.1"
    /// The port; 0 picks a free one (tests).
    public var port = 8080
    /// The folder of the database (and of the development issuer key).
    public var dataDirectory = "./mailslot-data"
    /// A PostgreSQL database, `postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=…]`, that
    /// several relays may share; nil: the embedded SQLite database in ``dataDirectory``. Carries
    /// a password: never logged.
    public var databaseURL: String?

    /// The store these settings choose: PostgreSQL at ``databaseURL`` when it is set, otherwise
    /// SQLite in ``dataDirectory``.
    public var storeBackend: StoreBackend {
        if let databaseURL { return .postgresql(url: databaseURL) }
        return .sqlite(path: (dataDirectory as NSString).appendingPathComponent("relay.sqlite"))
    }
    /// The issuer public keys whose custom tokens are accepted.
    public var issuerKeys: [IdentityPublicKey] = []
    /// This relay's id: the `aud` its tokens must carry.
    public var audience = Defaults.audience
    /// How commits reach the disk.
    public var durability = Durability.normal

    /// Lifetime of an access session, in seconds.
    public var sessionLifetime: Int64 = 15 * 60
    /// Lifetime of a refresh token, in seconds.
    public var refreshLifetime: Int64 = 30 * 24 * 3600

    /// The largest envelope accepted, in bytes: a size class (a power of two from 512 bytes to 1 MiB).
    public var maxEnvelopeBytes = Defaults.maxEnvelopeBytes
    /// The largest request body, in bytes: the largest envelope in base64url, plus room for the JSON around it.
    public var maxBodyBytes: Int { maxEnvelopeBytes * 4 / 3 + 4096 }
    /// Default and maximum message lifetime, in seconds.
    public var defaultMessageTTL = Defaults.messageTTL
    public var maxMessageTTL = Defaults.maxMessageTTL
    /// The most pending messages in one mailbox.
    public var maxPendingPerMailbox = Defaults.maxPendingPerMailbox
    /// Per-author creates: sustained rate per second and burst. Each entry of a send to many is
    /// one create (spec/protocol.md §5.5): about 10,000 recipients a minute, 2,000 at once.
    public var createRate: Double = 167
    public var createBurst: Double = 2000
    /// The most entries of one send to many (`POST /v1/messages`, `send_many`).
    public var maxBatchEntries = Defaults.maxBatchEntries
    /// The largest body of a send to many, in bytes (HTTP body or `send_many` frame).
    public var maxBatchBytes = Defaults.maxBatchBytes
    /// The most bytes of send-to-many bodies being read or held at once on this relay, HTTP and
    /// WebSocket together (spec/protocol.md §5.5): a body that would pass it waits for room.
    public var maxBatchBytesInFlight = 64 << 20
    /// Delivered-but-unacknowledged messages per subscription.
    public var deliveryWindow = Defaults.deliveryWindow
    /// The largest WebSocket frame accepted, in bytes: a `send` frame with the largest envelope.
    public var maxFrameBytes: Int { maxEnvelopeBytes * 4 / 3 + 4096 }
    /// The deepest JSON nesting accepted in any request body or frame.
    public var maxJSONDepth = 16
    /// The most concurrent connections (HTTP and WebSocket together).
    public var maxConnections = 10_000
    /// Seconds a new connection has to send its first complete request head; then it is closed.
    public var headerTimeout: Double = 10
    /// Seconds an HTTP connection may stay silent (before its first request head, and between
    /// requests); then it is closed. A subscription's own ping takes over after the upgrade.
    public var idleTimeout: Double = 60
    /// The most fragments one WebSocket message may arrive in.
    public var maxFrameFragments = 64

    /// Bytes of envelopes one author may have waiting in all mailboxes together.
    public var maxAuthorBytes: Int64 = 256 * 1024 * 1024
    /// Live sign-ins (session families) per uid; a new one evicts the least recently refreshed.
    public var maxSessionFamilies = 32
    /// The most authors one owner may block.
    public var maxBlockedPerOwner = 10_000
    /// The most one-time prekeys stored for one owner (`409 too_many_prekeys` beyond).
    public var maxPrekeys = 200
    /// Prekey claims per claimer: sustained rate per second and burst.
    public var prekeyClaimRate: Double = 1
    public var prekeyClaimBurst: Double = 60
    /// Prekey claims of one owner's prekeys, by everyone together: rate per second and burst.
    public var prekeyMailboxRate: Double = 0.2
    public var prekeyMailboxBurst: Double = 30
    /// Envelope bytes (as base64url text) one page of `GET …/messages` holds at most; a longer
    /// page stops early and gives `next`.
    public var maxPageBytes = 4 * 1024 * 1024
    /// Reads of one mailbox (pages and single messages) in progress at once.
    public var maxConcurrentReads = 4
    /// Reads in progress on this relay at once, all mailboxes together; half of them are kept for
    /// mailboxes with no read in progress (`ReadLimiter`).
    public var maxReads = 64
    /// The relays sharing the database (1 for one relay, at most ``maxRelays``): the prekey claim
    /// rates and bursts are for all of them together, each relay counting its share
    /// (`PrekeyClaimLimiter`).
    public var relays = 1
    /// The most relays ``relays`` may name. Far more than one database serves; a bound, so that a
    /// mistyped number cannot divide the claim rates into buckets that never refill.
    public static let maxRelays = 1000
    /// Creates are refused (`507 storage_full`) while the data folder's file system has less
    /// free space than this, in bytes; acks, unsends, sweeps and sign-ins go on.
    public var minFreeBytes: Int64 = 256 * 1024 * 1024
    /// A file of this many bytes kept in the data folder, released when a write finds the disk
    /// full, so that erasing (which needs room in the WAL) can always run.
    public var reserveBytes: Int64 = 64 * 1024 * 1024
    /// The largest owner document, in bytes.
    public var maxDocumentBytes = Defaults.maxDocumentBytes
    /// How often an open subscription re-checks that its session was not revoked, in seconds.
    public var sessionCheckInterval: Double = 5
    /// How often expired messages are swept, in seconds.
    public var sweepInterval: Double = 60
    /// Expired messages erased per sweep transaction: other writes wait for one batch at most.
    public var sweepBatch = 256
    /// How soon after an erasure the WAL is truncated, in seconds: the bound on how long erased
    /// ciphertext can linger in the database files.
    public var erasureDelay: Double = 1

    /// The largest file a blob may carry, in plaintext bytes (1 MiB … 64 GiB); the largest blob
    /// is its sealed size, `FileCipher.size(plainSize:)`.
    public var maxFileBytes = Defaults.maxFileBytes
    /// Bytes of blobs, finished and unfinished (declared sizes), one author may hold.
    public var maxAuthorBlobBytes = Defaults.maxAuthorBlobBytes
    /// Unfinished uploads one author may have at once.
    public var maxUploadsPerAuthor = Defaults.maxUploadsInProgress
    /// Bytes per part of a blob upload (1 MiB … 64 MiB): what one request carries, and about
    /// what one upload costs the relay in memory.
    public var blobPartBytes = Defaults.blobPartSize
    /// Seconds an unfinished upload is kept before it is erased.
    public var blobUploadTTL = Defaults.blobUploadTTL
    /// The most recipients one blob may name.
    public var maxBlobRecipients = Defaults.maxBlobRecipients
    /// Where blob bytes live: files under the data folder, or an S3-compatible object store.
    public var blobStore = BlobStore.files
    /// Blob transfer bytes per second on this relay, part uploads and downloads together
    /// (`TransferBandwidth`); 0: no cap. Off by default: what suits a machine depends on its cores
    /// and on where its clients are (docs/operations.md, "Transfer bandwidth").
    public var maxTransferRate: Int64 = 0
    /// The most part uploads and downloads of one uid in progress on this relay (fixed outside tests).
    var maxTransfersPerUID = Defaults.maxTransfersPerUID
    /// Where the relay reads "now" (sign-in and session expiry, message expiry and the sweep, rate
    /// limits, blob deadlines): the wall clock outside tests, which move a clock of their own
    /// instead of sleeping (MailslotTestSupport's `TestClock`). Package-only: no setting, no
    /// public API.
    package var clock = RelayClock.system
    /// Where the transfer bandwidth cap reads the time and sleeps: the continuous clock outside
    /// tests, which give one whose sleeps only move its time. Package-only, as ``clock``.
    package var transferClock = TransferClock.system

    /// Where blob bytes live.
    public enum BlobStore: Sendable, Equatable {
        /// Files under `<data>/blobs` (the default; one relay).
        case files
        /// An S3-compatible object store, as the operator wrote it: `s3://BUCKET[/PREFIX]?endpoint=…`.
        case s3(String)
    }

    /// The largest request body any route accepts: a blob part, the largest JSON body (a send
    /// with the largest envelope, a document, a blob create with the most recipients). A request
    /// declaring more is refused before its body is read (`RequestBodyLimit`).
    public var maxRequestBodyBytes: Int {
        max(Int(blobPartBytes), maxBodyBytes, maxDocumentBytes, 4096 + 132 * maxBlobRecipients, maxBatchBytes, 16 * 1024)
    }

    /// Wake-ups: the interval, limits and each provider's settings (docs/design/wakeups.md §6).
    public var push = PushSettings()

    /// The bearer token Prometheus sends to scrape /metrics. Without one, /metrics answers only
    /// when the relay listens on a loopback address.
    public var metricsToken: String?

    /// The access rules: always ``AccessRules/standard`` outside tests (internal on purpose).
    var rules = AccessRules.standard
    /// How the data folder's free space is read: statvfs outside tests (internal on purpose).
    var diskSpaceProbe: DiskSpace.Probe = DiskSpace.available
    /// Where the object store's credentials are read: the process's environment, always, outside
    /// tests (which inject one; internal on purpose: no flag or file ever carries a secret).
    var credentialEnvironment: @Sendable () -> [String: String] = { ProcessInfo.processInfo.environment }

    /// The defaults.
    public init() {}

    /// How commits reach the disk.
    public enum Durability: String, Sendable, CaseIterable {
        /// An answered write survives a crash of the relay process, not of the machine.
        case normal
        /// Every commit is fsync'd: an answered write survives a power loss too.
        case full
    }

    /// Every value that is out of range, or contradicts another, as a sentence for the operator;
    /// empty when a relay can run with this configuration.
    public var problems: [String] {
        var problems: [String] = []
        func require(_ condition: Bool, _ problem: @autoclosure () -> String) { if !condition { problems.append(problem()) } }
        require(!issuerKeys.isEmpty, Self.noIssuerKey)
        require(!audience.isEmpty, "the audience must not be empty.")
        require(!dataDirectory.isEmpty, "the data folder must be named.")
        require((0...65535).contains(port), "the port \(port) is not one from 0 to 65535.")
        require((Envelope.minimumSize...Envelope.maximumSize).contains(maxEnvelopeBytes) && maxEnvelopeBytes & (maxEnvelopeBytes - 1) == 0,
                "the largest envelope (\(maxEnvelopeBytes) bytes) must be a size class: a power of two from \(Envelope.minimumSize) to \(Envelope.maximumSize).")
        require(maxAuthorBytes >= Int64(maxEnvelopeBytes),
                "an author's stored bytes (\(maxAuthorBytes)) must be at least the largest envelope (\(maxEnvelopeBytes)).")
        require(sessionLifetime >= 1 && refreshLifetime >= 1, "the session and refresh lifetimes must be at least 1 s.")
        require(sessionLifetime <= refreshLifetime,
                "the session lifetime (\(sessionLifetime) s) is longer than the refresh lifetime (\(refreshLifetime) s).")
        require(defaultMessageTTL >= 1 && maxMessageTTL >= 1, "the message lifetimes must be at least 1 s.")
        require(defaultMessageTTL <= maxMessageTTL,
                "the default message lifetime (\(defaultMessageTTL) s) is longer than the maximum (\(maxMessageTTL) s).")
        // Clients keep a replaced mailbox key for this long and a day (spec/envelope.md §4.2): a
        // message that lived longer could be sealed to a key its recipient has erased.
        require(maxMessageTTL <= Defaults.maxMessageTTL,
                "the longest message lifetime (\(maxMessageTTL) s) is over \(Defaults.maxMessageTTL) s (30 days), how long clients keep a replaced mailbox key.")
        require(createRate > 0 && createRate.isFinite && createBurst >= 1 && createBurst.isFinite,
                "the create rate must be a number above 0 and the burst at least 1.")
        for (name, rate, burst) in [("prekey claim", prekeyClaimRate, prekeyClaimBurst),
                                    ("prekey mailbox", prekeyMailboxRate, prekeyMailboxBurst)] {
            require(rate > 0 && rate.isFinite && burst >= 1 && burst.isFinite,
                    "the \(name) rate must be a number above 0 and the burst at least 1.")
        }
        for (name, value) in [("pending messages per mailbox", maxPendingPerMailbox), ("delivery window", deliveryWindow),
                              ("connection limit", maxConnections), ("JSON depth", maxJSONDepth), ("frame fragments", maxFrameFragments),
                              ("sign-ins per user", maxSessionFamilies), ("block list", maxBlockedPerOwner), ("prekeys per user", maxPrekeys),
                              ("page size", maxPageBytes), ("concurrent reads", maxConcurrentReads), ("reads per relay", maxReads),
                              ("sweep batch", sweepBatch)] {
            require(value >= 1, "the \(name) must be at least 1, not \(value).")
        }
        require((1...Self.maxRelays).contains(relays), "the number of relays must be from 1 to \(Self.maxRelays), not \(relays).")
        require(maxDocumentBytes >= 2, "the largest document must be at least 2 bytes ({}), not \(maxDocumentBytes).")
        for (name, value) in [("header timeout", headerTimeout), ("idle timeout", idleTimeout),
                              ("session check interval", sessionCheckInterval), ("sweep interval", sweepInterval)] {
            require(value > 0 && value.isFinite, "the \(name) must be a number of seconds above 0, not \(value).")
        }
        require(erasureDelay >= 0 && erasureDelay.isFinite, "the erasure delay must be a number of seconds, not \(erasureDelay).")
        require((Self.minFileBytes...Self.maxFileBytesLimit).contains(maxFileBytes),
                "the largest file (\(maxFileBytes) bytes) must be from \(Self.minFileBytes) (1 MiB) to \(Self.maxFileBytesLimit) (64 GiB).")
        require((Self.minPartBytes...Self.maxPartBytes).contains(blobPartBytes),
                "the blob part size (\(blobPartBytes) bytes) must be from \(Self.minPartBytes) (1 MiB) to \(Self.maxPartBytes) (64 MiB).")
        if let sealed = FileCipher.size(plainSize: maxFileBytes), blobPartBytes > 0 {
            require(BlobLayout(size: sealed, partSize: blobPartBytes) != nil,
                    "the largest file (\(maxFileBytes) bytes) needs more than \(BlobLayout.maxParts) parts of \(blobPartBytes) bytes: raise the part size.")
            require(maxAuthorBlobBytes >= sealed,
                    "an author's blob bytes (\(maxAuthorBlobBytes)) must be at least the largest blob (\(sealed) bytes sealed).")
        }
        if case .s3 = blobStore {
            // AWS (and MinIO, Ceph) refuse a part under 5 MiB but the last, at completion
            // (EntityTooSmall): every upload of more than one part would fail at its end.
            require(blobPartBytes >= Self.minS3PartBytes,
                    "with an S3 blob store the part size (\(blobPartBytes) bytes) must be at least \(Self.minS3PartBytes) (5 MiB): S3 refuses smaller parts.")
        }
        require(maxUploadsPerAuthor >= 1, "the unfinished uploads per author must be at least 1, not \(maxUploadsPerAuthor).")
        require(blobUploadTTL >= 60, "the unfinished upload lifetime must be at least 60 s, not \(blobUploadTTL).")
        require((1...Self.maxBlobRecipientsLimit).contains(maxBlobRecipients),
                "the recipients per blob must be from 1 to \(Self.maxBlobRecipientsLimit), not \(maxBlobRecipients).")
        require(maxTransfersPerUID >= 1, "the transfers per uid must be at least 1.")
        require(maxTransferRate == 0 || (Self.minTransferRate...Self.maxTransferRateLimit).contains(maxTransferRate),
                "the transfer rate (\(maxTransferRate) bytes/s) must be 0 (no cap) or from \(Self.minTransferRate) (1 MB/s) to \(Self.maxTransferRateLimit) (1 TB/s).")
        require((1...Self.maxBatchEntriesLimit).contains(maxBatchEntries),
                "the entries of a send to many must be from 1 to \(Self.maxBatchEntriesLimit), not \(maxBatchEntries).")
        require((Self.minBatchBytes...Self.maxBatchBytesLimit).contains(maxBatchBytes),
                "the largest send to many (\(maxBatchBytes) bytes) must be from \(Self.minBatchBytes) (1 MiB) to \(Self.maxBatchBytesLimit) (64 MiB).")
        require(maxBatchBytesInFlight >= maxBatchBytes,
                "the send-to-many bodies held at once (\(maxBatchBytesInFlight) bytes) must be at least the largest one (\(maxBatchBytes)).")
        require(minFreeBytes >= 0 && reserveBytes >= 0, "the free-space watermark and the disk reserve must not be negative.")
        problems += push.problems
        return problems
    }

    /// Bounds of the blob settings.
    public static let minFileBytes: Int64 = 1 << 20
    public static let maxFileBytesLimit: Int64 = 64 << 30
    public static let minPartBytes: Int64 = 1 << 20
    public static let maxPartBytes: Int64 = 64 << 20
    /// S3's smallest part but the last (docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html).
    public static let minS3PartBytes: Int64 = 5 << 20
    public static let maxBlobRecipientsLimit = 10_000
    /// The least `--max-transfer-rate` but 0 (1 MB/s): below it a single part of the default
    /// size would take seconds, and clients' timeouts would fail transfers rather than slow them.
    public static let minTransferRate: Int64 = 1_000_000
    /// The most `--max-transfer-rate` (1 TB/s): far above any disk or network.
    public static let maxTransferRateLimit: Int64 = TransferBandwidth.maxRate
    /// The most entries `--max-batch-entries` may allow.
    public static let maxBatchEntriesLimit = 10_000
    /// The least `--max-batch-bytes` (1 MiB): room for about a dozen of the largest envelopes.
    public static let minBatchBytes = 1 << 20
    /// The most `--max-batch-bytes` (64 MiB), the whole default budget of bodies being read.
    public static let maxBatchBytesLimit = 64 << 20

    /// The problem of a configuration that trusts no issuer: `serve` then adds its development key.
    static let noIssuerKey = "no issuer public key is configured."

    /// Throws ``problems`` (all of them, one sentence each) unless there are none.
    public func validate() throws {
        let problems = problems
        guard problems.isEmpty else { throw RelayConfigurationError(problems.joined(separator: " ")) }
    }

    /// Whether `host` is a loopback address, reachable from this machine only.
    public var listensOnLoopbackOnly: Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
