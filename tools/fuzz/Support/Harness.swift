// Shared by every fuzz target (tools/fuzz/run compiles this file into each one): the fixed keys
// the targets open, verify and sign with, the check that turns a broken invariant into a crash
// libFuzzer records, and the `--make-seeds=DIR` start-up path that writes a target's seed corpus.
//
// Each target file defines `LLVMFuzzerTestOneInput` and `fuzzSeeds(root:)`.

import Foundation
import MailslotWire

/// The fixed keys and names the targets use. Published test keys only: the recipient key is the
/// one of spec/vectors/envelopes.json and the issuer key the one of spec/vectors/tokens.json, so
/// that the spec's vectors are valid seeds.
enum Fixed {
    /// The recipient `bob`'s mailbox key pair (spec/vectors/envelopes.json).
    static let recipientKeys: MailboxKeyPair = {
        guard let secret = Base64URL.decode("eFN9w9V1iqKuWEpMUMVY90dyVF_2WTX55to-eK_ZxlI"),
              let keys = MailboxKeyPair(secretKey: SecretBytes(copying: secret)) else {
            fatalError("the fixed recipient key does not decode")
        }
        return keys
    }()
    static let recipient = "bob"
    static let messageID = "01KF0000000000000000000000"

    /// The sender `alice`'s identity, used to sign records whose body the fuzzer chooses.
    static let sender = "alice"
    static let senderIdentity = IdentityKeyPair(seed: SecretBytes(copying: [UInt8](repeating: 0x11, count: 32)))

    /// The issuer key of spec/vectors/tokens.json (seed 00 01 … 1f) and its audience.
    static let issuer = IdentityKeyPair(seed: SecretBytes(copying: (0..<32).map { UInt8($0) }))
    static let audience = "relay.example"
    static let verifier = TokenVerifier(issuerKeys: [issuer.publicKey], audience: audience)
    /// The `now` of spec/vectors/tokens.json, at which its valid tokens verify.
    static let now: Date = {
        guard let seconds = Timestamp.parse("2027-01-15T08:00:00+00:00") else { fatalError("the fixed time does not parse") }
        return Date(timeIntervalSince1970: seconds)
    }()

    /// The `v4.local` key of the official PASETO vectors (70 71 … 8f).
    static let localKey: SymmetricKey = {
        guard let key = SymmetricKey(bytes: SecretBytes(copying: (0x70...0x8F).map { UInt8($0) })) else {
            fatalError("the fixed local key has the wrong length")
        }
        return key
    }()

    /// The relay's default JSON depth limit (RelayConfiguration.maxJSONDepth).
    static let relayMaxJSONDepth = 16
}

/// Traps (so libFuzzer keeps the input) when an invariant of the code under test is broken.
/// Unlike `assert`, it stays on in `-O` builds.
func expect(_ condition: @autoclosure () -> Bool, _ what: @autoclosure () -> String,
            file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("fuzz invariant broken: \(what())", file: file, line: line) }
}

/// `record || 0x80 || 0x00…`, sealed to bob's key (as anyone can seal to it), so that what
/// follows the outer layer sees the fuzzer's record; nil when the record fits no size class.
func sealPaddedToRecipient(_ record: [UInt8]) -> [UInt8]? {
    guard let size = Envelope.sizeClass(forRecordLength: record.count) else { return nil }
    var padded = record + [0x80]
    padded += [UInt8](repeating: 0, count: size - 48 - padded.count)
    return Fixed.recipientKeys.publicKey.seal(padded)
}

/// The fuzzer's input as bytes.
func bytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// Seed helpers: reading the spec's vector files.
enum Seeds {
    /// The JSON object in `root/relativePath`; traps if the file is missing, so a moved vector
    /// file is noticed rather than silently shrinking the corpus.
    static func json(_ root: String, _ relativePath: String) -> [String: Any] {
        let url = URL(fileURLWithPath: root).appendingPathComponent(relativePath)
        guard let data = try? Data(contentsOf: url),
              let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            fatalError("cannot read the vector file \(relativePath)")
        }
        return object
    }

    /// The array of objects under `key`.
    static func list(_ object: [String: Any], _ key: String) -> [[String: Any]] {
        object[key] as? [[String: Any]] ?? []
    }

    /// Bytes for a mode byte followed by `payload`.
    static func mode(_ mode: UInt8, _ payload: some Sequence<UInt8>) -> [UInt8] {
        [mode] + Array(payload)
    }
}

/// libFuzzer calls this before parsing its own flags. `--make-seeds=DIR` (libFuzzer ignores flags
/// with two dashes) writes the target's seeds into DIR and exits; `--root=DIR` names the
/// repository the seeds are read from (default: the working directory).
@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>,
                           _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> CInt {
    var seedDirectory: String?
    var root = FileManager.default.currentDirectoryPath
    if let arguments = argv.pointee {
        for index in 0..<Int(argc.pointee) {
            guard let pointer = arguments[index] else { continue }
            let argument = String(cString: pointer)
            if argument.hasPrefix("--make-seeds=") { seedDirectory = String(argument.dropFirst("--make-seeds=".count)) }
            if argument.hasPrefix("--root=") { root = String(argument.dropFirst("--root=".count)) }
        }
    }
    guard let seedDirectory else { return 0 }
    let directory = URL(fileURLWithPath: seedDirectory)
    do {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let seeds = fuzzSeeds(root: root)
        for (index, seed) in seeds.enumerated() {
            let name = String(seed.name.map { $0.isLetter || $0.isNumber ? $0 : "-" })
            try Data(seed.bytes).write(to: directory.appendingPathComponent("seed-\(index)-\(name)"))
        }
        print("wrote \(seeds.count) seeds to \(seedDirectory)")
        exit(0)
    } catch {
        print("cannot write the seeds: \(error)")
        exit(1)
    }
}
