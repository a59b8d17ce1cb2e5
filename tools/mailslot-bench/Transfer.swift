import Foundation
import MailslotWire
import NIOCore

/// What `mailslot-bench transfer` was asked to do.
struct TransferSettings: Sendable {
    let mode: Mode
    /// Files in all, spread over the clients.
    let files: Int
    /// Plaintext bytes per file; the relay holds ``FileCipher/size(plainSize:)`` of it.
    let size: Int64
    let clients: Int
    /// Ordinary messages per second sent beside the transfers (nil: none).
    let alongsideRate: Double?
    /// How long the ordinary messages run, with and without transfers.
    let alongsideSeconds: Double
    /// The spawned relay's `--max-transfer-rate`, bytes per second (nil: not given, the relay's default).
    let maxTransferRate: Int64?
    let quiet: Bool
}

/// One transfer measurement: `clients` uploaders each with a recipient of its own; in relay mode
/// pre-made ciphertext (random bytes of a ciphertext size, made before the clock) goes up in the
/// relay's parts and comes down compared byte for byte; in e2e mode each file is encrypted from
/// disk, uploaded, downloaded to disk and opened (digest, every tag, padding) into a new file,
/// compared with its source after the clock. Every blob is acknowledged, and the run checks that
/// the relay then holds nothing of it.
struct TransferRun {
    let settings: TransferSettings
    let target: RelayTarget

    /// A client's pair of users and the files it carries.
    private struct Lane: Sendable {
        let uploader: BenchUser
        let recipient: BenchUser
        let files: [Int]
    }

    func run() async throws -> RunReport {
        let s = settings
        guard let cipherSize = FileCipher.size(plainSize: s.size) else { throw BenchFailure.usage("--size is beyond the file format's largest") }
        let prefix = Users.runPrefix()
        let uids = (0..<s.clients).flatMap { ["\(prefix)-u\($0)", "\(prefix)-r\($0)"] }
        let users = try await Users.signIn(uids, target: target, publish: nil)
        let lanes = (0..<s.clients).map { c in
            Lane(uploader: users[2 * c], recipient: users[2 * c + 1], files: Array(stride(from: c, to: s.files, by: s.clients)))
        }
        let http = BlobHTTP(base: target.http.base, connections: 2 * s.clients + 4)
        do {
            let report = try await measure(lanes: lanes, http: http, cipherSize: cipherSize, prefix: prefix)
            await http.shutdown()
            return report
        } catch {
            await http.shutdown()
            throw error
        }
    }

    private func measure(lanes: [Lane], http: BlobHTTP, cipherSize: Int64, prefix: String) async throws -> RunReport {
        let s = settings
        let work = try TransferWorkload(mode: s.mode, files: s.files, size: s.size, cipherSize: cipherSize, partSize: Defaults.blobPartSize)
        defer { work.remove() }
        let ids = (0..<s.files).map { _ in BlobLayout.newID() }
        let sampler = RSSSampler(target: target)
        let rssBefore = await target.residentBytes()
        let peakBefore = await target.peakResidentBytes()
        sampler.start()

        var baselineP99: Double?, alongsideP99: Double?, alongsideProblems: [String] = []
        var up = Phase(), down = Phase()
        if let rate = s.alongsideRate {
            let quiet = RunSettings(mode: .relay, envelope: .v1, oneTimePrekeys: false, cryptoBatches: 0, cryptoBatchMessages: 1,
                                    senders: 4, recipients: 4, slowRecipients: 0, subscribers: 0, size: 256,
                                    duration: s.alongsideSeconds, messages: nil, rate: rate, window: 32, drainTimeout: 30, quiet: true)
            let baseline = try await Benchmark(settings: quiet, target: target).run()
            baselineP99 = baseline.deliveryP99
            alongsideProblems += baseline.problems.map { "without transfers: \($0)" }
            // Transfers go on in cycles (upload, download, acknowledge) for as long as the messages run.
            let stop = Locked(false)
            async let messages = { () async throws -> RunReport in
                defer { stop.withLock { $0 = true } }
                return try await Benchmark(settings: quiet, target: target).run()
            }()
            let cycles = try await cycle(lanes: lanes, http: http, work: work, prefix: prefix, until: stop)
            let beside = try await messages
            alongsideP99 = beside.deliveryP99
            alongsideProblems += beside.problems.map { "beside transfers: \($0)" }
            up = cycles.up
            down = cycles.down
        } else {
            up = try await phase { try await upload(lanes: lanes, ids: ids, http: http, work: work) }
            down = try await phase { try await download(lanes: lanes, ids: ids, http: http, work: work) }
        }
        sampler.stop()
        let rssPeakSampled = sampler.peak
        let peakAfter = await target.peakResidentBytes()
        var problems = alongsideProblems
        if s.mode == .e2e, s.alongsideRate == nil {
            for file in 0..<s.files where !work.outputMatches(file) { problems.append("file \(file) did not come back byte for byte") }
        }
        problems += await leftovers(lanes: lanes, ids: s.alongsideRate == nil ? ids : [], http: http)

        // Figures: ciphertext bytes (what the relay moves) per second of wall time, each way.
        let perFile = s.mode == .relay ? Double(cipherSize) : Double(s.size)
        let mb = 1_000_000.0, mib = 1_048_576.0
        func rate(_ phase: Phase) -> Double { phase.seconds > 0 ? Double(phase.files) * perFile / mb / phase.seconds : 0 }
        func cpu(_ phase: Phase) -> Double? { phase.relayCPU.map { $0 * 1000 / (Double(phase.files) * Double(cipherSize) / mib) } }
        let growth = rssBefore.flatMap { before in rssPeakSampled.map { $0 - before } }
        let hwmGrowth = rssBefore.flatMap { before in (peakAfter ?? 0) > (peakBefore ?? 0) ? peakAfter.map { $0 - before } : 0 }

        var lines: [String] = []
        lines.append("mailslot-bench transfer, \(s.mode.rawValue) mode — \(target.description)")
        lines.append("  \(s.clients) clients, \(s.files) files of \(Format.bytes(Int(s.size))) (ciphertext \(cipherSize) B, parts of \(Format.bytes(Int(Defaults.blobPartSize))))"
                     + (s.alongsideRate.map { ", in cycles beside \(Int($0)) msg/s for \(Int(s.alongsideSeconds)) s" } ?? "")
                     + (s.maxTransferRate.map { ", relay capped at \($0) B/s" } ?? ""))
        let unit = s.mode == .relay ? "ciphertext" : "file bytes, encrypt+upload / download+open"
        lines.append(String(format: "  upload:   %d files in %.2f s: %.0f MB/s (%@); relay CPU %@ ms/MiB", up.files, up.seconds, rate(up), unit,
                            Format.optional(cpu(up), "%.2f")))
        lines.append(String(format: "  download: %d files in %.2f s: %.0f MB/s (%@); relay CPU %@ ms/MiB", down.files, down.seconds, rate(down), unit,
                            Format.optional(cpu(down), "%.2f")))
        lines.append("  relay RSS before \(Format.bytes(rssBefore)), sampled peak \(Format.bytes(rssPeakSampled)): growth \(Format.bytes(growth)); VmHWM \(Format.bytes(peakBefore)) → \(Format.bytes(peakAfter))")
        if let baselineP99, let alongsideP99 {
            lines.append(String(format: "  ordinary messages' p99 (send → delivery): %.3f ms alone, %.3f ms beside transfers (×%.2f)",
                                baselineP99, alongsideP99, baselineP99 > 0 ? alongsideP99 / baselineP99 : 0))
        }
        lines.append("  machine: " + ProcessStats.machine().map { "\($0.0) \($0.1)" }.joined(separator: "; "))
        lines.append(problems.isEmpty ? "  PASS: every file came back whole, was acknowledged and erased" : "  FAIL: " + problems.joined(separator: "; "))
        let json = JSON.object([
            ("command", .string("transfer")), ("mode", .string(s.mode.rawValue)), ("clients", .int(s.clients)), ("files", .int(s.files)),
            ("size", .int(Int(s.size))), ("ciphertext_size", .int(Int(cipherSize))), ("part_size", .int(Int(Defaults.blobPartSize))),
            ("upload_files", .int(up.files)), ("upload_s", .number(up.seconds)), ("upload_mb_per_s", .number(rate(up))),
            ("upload_relay_cpu_ms_per_mib", .number(cpu(up))),
            ("download_files", .int(down.files)), ("download_s", .number(down.seconds)), ("download_mb_per_s", .number(rate(down))),
            ("download_relay_cpu_ms_per_mib", .number(cpu(down))),
            ("relay_rss_before_bytes", .int(rssBefore)), ("relay_rss_peak_sampled_bytes", .int(rssPeakSampled)), ("relay_rss_growth_bytes", .int(growth)),
            ("relay_hwm_growth_bytes", .int(hwmGrowth)),
            ("max_transfer_rate", .int(s.maxTransferRate.map(Int.init))), ("alongside_rate", .number(s.alongsideRate)), ("p99_ms_alone", .number(baselineP99)), ("p99_ms_beside", .number(alongsideP99)),
            ("ok", .bool(problems.isEmpty)), ("problems", .array(problems.map(JSON.string))),
        ])
        return RunReport(summary: lines.joined(separator: "\n"), json: json, problems: problems)
    }

    // MARK: Phases

    /// Files moved one way, the wall time and the relays' CPU seconds for it.
    private struct Phase {
        var files = 0
        var seconds = 0.0
        var relayCPU: Double?
    }

    private func phase(_ body: () async throws -> Int) async throws -> Phase {
        let cpuBefore = await target.cpuSeconds()
        let start = Monotonic.now()
        let files = try await body()
        let seconds = Monotonic.seconds(start, Monotonic.now())
        let cpuAfter = await target.cpuSeconds()
        return Phase(files: files, seconds: seconds, relayCPU: cpuBefore.flatMap { before in cpuAfter.map { $0 - before } })
    }

    private func upload(lanes: [Lane], ids: [String], http: BlobHTTP, work: TransferWorkload) async throws -> Int {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for lane in lanes {
                group.addTask {
                    for file in lane.files { try await uploadOne(file, id: ids[file], lane: lane, http: http, work: work) }
                    return lane.files.count
                }
            }
            return try await group.reduce(0, +)
        }
    }

    private func download(lanes: [Lane], ids: [String], http: BlobHTTP, work: TransferWorkload) async throws -> Int {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for lane in lanes {
                group.addTask {
                    for file in lane.files { try await downloadOne(file, id: ids[file], lane: lane, http: http, work: work) }
                    return lane.files.count
                }
            }
            return try await group.reduce(0, +)
        }
    }

    /// Upload, download and acknowledge each lane's first file again and again until `stop`;
    /// the time spent each way is summed per lane, the rates over the wall time of the cycles.
    private func cycle(lanes: [Lane], http: BlobHTTP, work: TransferWorkload, prefix: String, until stop: Locked<Bool>) async throws -> (up: Phase, down: Phase) {
        let cpuBefore = await target.cpuSeconds()
        let start = Monotonic.now()
        let counts = try await withThrowingTaskGroup(of: (Int, Double, Double).self) { group in
            for lane in lanes {
                group.addTask {
                    var done = 0, upSeconds = 0.0, downSeconds = 0.0
                    let file = lane.files.first ?? 0
                    while !stop.withLock({ $0 }) {
                        let id = BlobLayout.newID()
                        let t0 = Monotonic.now()
                        try await uploadOne(file, id: id, lane: lane, http: http, work: work)
                        let t1 = Monotonic.now()
                        try await downloadOne(file, id: id, lane: lane, http: http, work: work)
                        downSeconds += Monotonic.seconds(t1, Monotonic.now())
                        upSeconds += Monotonic.seconds(t0, t1)
                        done += 1
                    }
                    return (done, upSeconds, downSeconds)
                }
            }
            return try await group.reduce(into: [(Int, Double, Double)]()) { $0.append($1) }
        }
        let wall = Monotonic.seconds(start, Monotonic.now())
        let cpuAfter = await target.cpuSeconds()
        let files = counts.map(\.0).reduce(0, +)
        let up = counts.map(\.1).reduce(0, +), down = counts.map(\.2).reduce(0, +)
        let cpu = cpuBefore.flatMap { before in cpuAfter.map { $0 - before } }
        // Each lane is busy the whole wall time, split between the two ways as it spent it.
        let upShare = up + down > 0 ? up / (up + down) : 0.5
        return (Phase(files: files, seconds: wall * upShare, relayCPU: cpu.map { $0 * upShare }),
                Phase(files: files, seconds: wall * (1 - upShare), relayCPU: cpu.map { $0 * (1 - upShare) }))
    }

    private func uploadOne(_ file: Int, id: String, lane: Lane, http: BlobHTTP, work: TransferWorkload) async throws {
        let size = work.uploadSize
        let record = try await http.create(id: id, size: size, recipients: [lane.recipient.uid], session: lane.uploader.session)
        guard let layout = BlobLayout(size: size, partSize: record.partSize) else { throw BenchFailure.failed("the relay's part size \(record.partSize) does not fit") }
        if let sealing = work.startSealing(file, partSize: layout.partSize) {
            // E2e: each part goes up as soon as it is sealed, while encryption goes on.
            for await part in sealing.parts {
                let body = try work.spoolBytes(file, layout.range(ofPart: part.number)!)
                try await http.putPart(id: id, number: part.number, body: body, digest: part.digest, session: lane.uploader.session)
            }
            try await sealing.sealed.value
            return
        }
        for number in 1...layout.parts {
            let (body, digest) = try work.part(file, layout.range(ofPart: number)!)
            try await http.putPart(id: id, number: number, body: body, digest: digest, session: lane.uploader.session)
        }
    }

    private func downloadOne(_ file: Int, id: String, lane: Lane, http: BlobHTTP, work: TransferWorkload) async throws {
        let sink = try work.downloadSink(file)
        let received = try await http.download(id: id, session: lane.recipient.session) { try sink.consume($0) }
        try work.finishDownload(file, sink: sink, received: received)
        try await http.acknowledge(id: id, session: lane.recipient.session)
    }

    /// What the relay still holds after every acknowledgement: blobs answering their author
    /// other than 404, and (a spawned relay) files under its `blobs/` folder, after giving the
    /// eraser up to 10 seconds.
    private func leftovers(lanes: [Lane], ids: [String], http: BlobHTTP) async -> [String] {
        var problems: [String] = []
        var still = 0
        for (file, id) in ids.enumerated() {
            let lane = lanes[file % lanes.count]
            if let status = try? await http.status(id: id, session: lane.uploader.session), status != 404 { still += 1 }
        }
        if still > 0 { problems.append("\(still) acknowledged blobs still answer their author") }
        for node in target.nodes {
            guard let folder = node.spawned?.dataDirectory.appendingPathComponent("blobs") else { continue }
            var files = 0
            for _ in 0..<100 {
                files = Self.regularFiles(under: folder)
                if files == 0 { break }
                try? await Task.sleep(for: .milliseconds(100))
            }
            if files > 0 { problems.append("\(files) files left under \(folder.path)") }
        }
        return problems
    }

    private static func regularFiles(under folder: URL) -> Int {
        guard let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey]) else { return 0 }
        var count = 0
        for case let url as URL in walker where (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true { count += 1 }
        return count
    }
}

/// Samples the relays' RSS every 100 ms while a run goes on, keeping the largest.
final class RSSSampler: Sendable {
    private let target: RelayTarget
    private let state = Locked<(peak: Int?, task: Task<Void, Never>?)>((nil, nil))

    init(target: RelayTarget) { self.target = target }

    func start() {
        let target = target, state = state
        let task = Task {
            while !Task.isCancelled {
                if let rss = await target.residentBytes() { state.withLock { $0.peak = max($0.peak ?? 0, rss) } }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        state.withLock { $0.task = task }
    }

    func stop() { state.withLock { $0.task?.cancel() } }

    var peak: Int? { state.withLock { $0.peak } }
}
