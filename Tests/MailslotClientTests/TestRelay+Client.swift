import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

extension TestRelay {
    /// A client for `uid` with its own database in the test's folder (`profile` names another one
    /// for the same uid: a reinstall), connected to ``TestRelay/node(for:)`` (on two relays,
    /// Alice's and Bob's clients are on different ones); its token provider mints from the
    /// relay's issuer. `url` points it elsewhere (a port where nothing listens).
    func client(_ uid: String, profile: String? = nil, url: URL? = nil, attachments: AttachmentPolicy = AttachmentPolicy()) throws -> MailslotClient {
        let issuer = issuer, audience = audience
        return try MailslotClient(relay: url ?? self.url(for: uid), databasePath: "\(folder)/\(profile ?? uid)/client.sqlite", attachments: attachments) {
            try TokenIssuer(key: issuer, audience: audience).mint(uid: uid)
        }
    }

    /// A signed-in client for each of `uids`, in order (``client(_:profile:url:attachments:)``).
    func signedInClients(_ uids: [String]) async throws -> [MailslotClient] {
        var clients: [MailslotClient] = []
        for uid in uids {
            let client = try client(uid)
            try await client.signIn()
            clients.append(client)
        }
        return clients
    }

    /// How many messages wait in `uid`'s mailbox, asked as its owner.
    func pending(_ uid: String) async throws -> Int {
        let page = try await call("GET", "/v1/users/\(uid)/messages", session: try await signIn(uid).session)
        return try page.decoded(MessagePage.self).messages.count
    }
}

extension MailslotClient {
    /// What this client makes of the first message waiting for it — stored or rejected, and the
    /// notice it queued — without acknowledging it, as after a crash or a lost ack.
    func acceptFirstWithoutAck() async throws -> Accepted {
        let me = try await identity()
        let uid = me.uid
        let page = try await authorized { try await api.list(uid, after: nil, session: $0) }
        return try await accept(try #require(page.messages.first), as: me)
    }
}
