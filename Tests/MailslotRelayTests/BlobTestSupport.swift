import Foundation
import MailslotTestSupport
@testable import MailslotRelay
import MailslotWire
import Synchronization

/// A blob's ciphertext as the tests upload it: random bytes of a valid ciphertext size (the relay
/// never decrypts; it checks sizes and part digests), cut into parts as the relay cuts them.
struct TestBlob {
    let id: String
    let bytes: [UInt8]
    let partSize: Int

    /// A blob of `FileCipher.size(plainSize:)` bytes with parts of `partSize`.
    init(plainSize: Int64, partSize: Int = 1 << 20, id: String = BlobLayout.newID()) {
        self.id = id
        let size = Int(FileCipher.size(plainSize: plainSize)!)
        bytes = randomBytes(size)
        self.partSize = partSize
    }

    var size: Int { bytes.count }
    var parts: Int { (size - 1) / partSize + 1 }

    func part(_ number: Int) -> [UInt8] {
        let start = (number - 1) * partSize
        return Array(bytes[start..<min(start + partSize, size)])
    }

    static func digest(_ bytes: [UInt8]) -> String { Base64URL.encode(blake2b(bytes, length: 32)) }

    func digest(_ number: Int) -> String { Self.digest(part(number)) }

    /// The create body for `recipients`.
    func create(_ recipients: [String], ttl: Int64? = nil) -> [String: Any] {
        var body: [String: Any] = ["id": id, "size": size, "recipients": recipients]
        if let ttl { body["ttl_seconds"] = ttl }
        return body
    }
}

extension TestRelay {
    /// `PUT /v1/blobs/{id}/parts/{n}` with the part's bytes (or `bytes`) and its digest (or `digest`).
    func putPart(_ blob: TestBlob, _ number: Int, session: String, bytes: [UInt8]? = nil, digest: String? = nil,
                 headers: [String: String] = [:]) async throws -> Answer {
        let body = bytes ?? blob.part(number)
        var fields = ["Content-Type": "application/octet-stream", "Mailslot-Digest": digest ?? TestBlob.digest(body)]
        fields.merge(headers) { $1 }
        return try await call("PUT", "/v1/blobs/\(blob.id)/parts/\(number)", session: session, body: Data(body), headers: fields)
    }

    /// Creates `blob` for `recipients` and uploads every part; throws unless it ends complete.
    func uploadBlob(_ blob: TestBlob, session: String, to recipients: [String], ttl: Int64? = nil) async throws {
        let created = try await call("POST", "/v1/blobs", session: session, body: blob.create(recipients, ttl: ttl))
        guard created.status == 201 else { throw TestRelayError("create: \(created.summary) \(created.text)") }
        var last: Answer?
        for number in 1...blob.parts {
            last = try await putPart(blob, number, session: session)
            guard last?.status == 200 else { throw TestRelayError("part \(number): \(last!.summary)") }
        }
        guard last?.json["state"] as? String == "complete" else { throw TestRelayError("not complete after its last part") }
    }

    /// The files under the relay's blob folder.
    var blobFiles: [String] {
        let root = dataDirectory + "/blobs"
        let folders = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return folders.flatMap { folder in ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + folder)) ?? []) }
    }

}
