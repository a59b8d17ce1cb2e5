import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// Files to a group (issue 30 item 2; docs/design/groups.md §5): one upload, one blob whose
/// recipients are the members but the sender, one `file` message through the group send; each
/// member saves the file, and the last acknowledgement erases the blob.
@Suite struct GroupFileTests {
    @Test func oneBlobForTheMembersIsSavedByEachAndErasedAfterTheLast() async throws {
        try await withTestRelay(store: try .configured.singleNode, configure: { $0.blobPartBytes = 1 << 20 }) { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(directory: URL(fileURLWithPath: relay.folder + "/bob-saved"),
                                                                          downloadAutomaticallyBelow: .max))
            let carol = try relay.client("carol", attachments: AttachmentPolicy(directory: URL(fileURLWithPath: relay.folder + "/carol-saved"),
                                                                              downloadAutomaticallyBelow: .max))
            for client in [alice, bob, carol] { try await client.signIn() }
            let group = try await alice.createGroup(name: "Crew", members: ["bob", "carol"])
            _ = try await bob.receive()
            _ = try await carol.receive()

            let blobCreates = { relay.sum("mailslot_http_requests_total", labelsContaining: ["POST", "route=\"/v1/blobs\""]) }
            let bytes = randomBytes(2 * (1 << 20) + 777)
            let source = try AttachmentTests.file(bytes, in: relay, named: "plan.pdf")
            let transfer = try await alice.send(file: OutgoingFile(url: source, mediaType: "application/pdf"), caption: "the plan", toGroup: group.id)
            #expect(try await transfer.outcome() == .sent(id: transfer.messageID))
            #expect(blobCreates() == 1, "one blob for the whole group")
            #expect(relay.counter("mailslot_blob_parts_received_total") == 3, "uploaded once")
            #expect(try await alice.copies(of: transfer.messageID).copies == ["bob": .sent(id: transfer.messageID), "carol": .sent(id: transfer.messageID)])
            let outgoing = try #require(try await alice.outgoing().first { $0.id == transfer.messageID })
            #expect(outgoing.state == .sent && outgoing.message?.group?.id == group.id)
            #expect(try await alice.store.uploads().isEmpty, "the upload is done with")

            // The relay holds one blob, for the two other members.
            let blob = try #require(outgoing.message?.payload.files?.first?.blob)
            let session = try await relay.signIn("alice").session
            let record = { try await relay.call("GET", "/v1/blobs/\(blob)", session: session) }
            #expect(try await record().decoded(BlobRecord.self).recipients == ["bob", "carol"])

            // Each member gets the message in the group and saves the file; the last one erases the blob.
            for (member, folder, left) in [(bob, "bob-saved", ["carol"]), (carol, "carol-saved", [])] {
                let received = try #require(try await member.receive().first)
                #expect(received.id == transfer.messageID && received.message.type == .file && received.message.payload.text == "the plan")
                #expect(received.group?.name == "Crew")
                guard case .saved(let path) = received.attachments.first?.state else { Issue.record("not saved: \(received.attachments)"); return }
                #expect(path.path == relay.folder + "/\(folder)/plan.pdf")
                #expect(FileManager.default.contents(atPath: path.path) == Data(bytes))
                if left.isEmpty {
                    #expect(try await record().status == 404, "every recipient acknowledged: erased")
                } else {
                    #expect(try await record().decoded(BlobRecord.self).recipients == left)
                }
            }
        }
    }
}
