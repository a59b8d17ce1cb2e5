import MailslotWire

// The one access-rule table of the relay. Every route and every WebSocket frame asks it; nothing
// else decides who may do what. Deny by default: a pair missing from the table allows no one.
//
// | resource                      | create    | read              | update | delete        | claim     | acknowledge |
// |-------------------------------|-----------|-------------------|--------|---------------|-----------|-------------|
// | /users/{uid}                  | owner     | owner             | owner  | owner         | —         | —           |
// | /users/{uid}/keys             | owner     | signed-in         | owner  | owner         | —         | —           |
// | /users/{uid}/messages/{id}    | signed-in | owner             | owner  | owner, author | —         | —           |
// | /users/{uid}/messages (list,  |           | owner             |        |               | —         | —           |
// |   subscribe)                  |           |                   |        |               |           |             |
// | /users/{uid}/blocked/{author} | owner     | owner             | —      | owner         | —         | —           |
// | /users/{uid}/prekeys          | owner     | owner             | —      | owner         | signed-in | —           |
// | /blobs/{id}                   | signed-in | author, recipient | author | author        | —         | recipient   |
// | /users/{uid}/blobs (list)     | —         | owner             | —      | —             | —         | —           |
// | /users/{uid}/push/{id} (and   | owner     | owner             | —      | owner         | —         | —           |
// |   the list /users/{uid}/push) |           |                   |        |               |           |             |
// | /push                         | —         | signed-in         | —      | —             | —         | —           |
//
// A blob has no owner in its path: its parties are its author and its recipients, and anyone
// else is answered as if it did not exist (404, spec/protocol.md §2).

/// The things the rules protect. (The rule table's three types are named `Access…`: as plain
/// `Resource`, `Operation` and `Role` they clashed with Foundation's `Operation` in code that
/// imports both.)
public enum AccessResource: String, Sendable, CaseIterable {
    /// The owner's private document, `/users/{uid}`.
    case userDocument
    /// The public key bundle, `/users/{uid}/keys`.
    case keyBundle
    /// One sealed message, `/users/{uid}/messages/{id}`.
    case message
    /// The whole mailbox: listing and subscribing, `/users/{uid}/messages`, `/users/{uid}/subscribe`.
    case mailbox
    /// One entry of the owner's block list, `/users/{uid}/blocked/{author}`.
    case blockEntry
    /// The owner's one-time prekeys, `/users/{uid}/prekeys` (and `…/prekeys/claim`).
    case prekeys
    /// One encrypted file held for its recipients, `/blobs/{id}` (and its parts and content).
    case blob
    /// The blobs a uid uploaded or may read, `/users/{uid}/blobs`.
    case blobList
    /// One push registration of the owner's devices, `/users/{uid}/push/{id}`, and their list,
    /// `/users/{uid}/push` (spec/push.md §2). A `PUT` that replaces one is a create, as a block
    /// entry's.
    case pushRegistration
    /// What the relay does with wake-ups (its providers, the VAPID key), `/push`: no owner.
    case pushService
}

/// What is done to a resource.
public enum AccessOperation: String, Sendable, CaseIterable {
    case create, read, update, delete
    /// Taking one item for oneself, which removes it (a one-time prekey).
    case claim
    /// Saying one has received an item, which ends one's access to it (a blob).
    case acknowledge
}

/// How the signed-in principal relates to the resource.
public enum AccessRole: Sendable, Hashable {
    /// The mailbox owner: the principal's uid is the `{uid}` of the path.
    case owner
    /// The stamped author of the message in question.
    case author
    /// Anyone with a valid session.
    case signedIn
    /// One of a blob's recipients that has not acknowledged it yet.
    case recipient
}

/// The access rules. Ask ``AccessRules/allows(_:_:principal:owner:author:)`` of ``standard``.
public struct AccessRules: Sendable {
    let table: [AccessResource: [AccessOperation: Set<AccessRole>]]

    /// The rules of spec/protocol.md: the only table a relay runs with. (Tests can derive a deliberately
    /// broken copy, to prove that the audit notices; no configuration reaches that from outside.)
    public static let standard = AccessRules(table: [
        .userDocument: [.create: [.owner], .read: [.owner], .update: [.owner], .delete: [.owner]],
        .keyBundle: [.create: [.owner], .read: [.signedIn], .update: [.owner], .delete: [.owner]],
        .message: [.create: [.signedIn], .read: [.owner], .update: [.owner], .delete: [.owner, .author]],
        .mailbox: [.read: [.owner]],
        .blockEntry: [.create: [.owner], .read: [.owner], .delete: [.owner]],
        .prekeys: [.create: [.owner], .read: [.owner], .delete: [.owner], .claim: [.signedIn]],
        .blob: [.create: [.signedIn], .read: [.author, .recipient], .update: [.author], .delete: [.author],
                .acknowledge: [.recipient]],
        .blobList: [.read: [.owner]],
        .pushRegistration: [.create: [.owner], .read: [.owner], .delete: [.owner]],
        .pushService: [.read: [.signedIn]],
    ])

    /// The roles `principal` holds toward a resource of `owner` (nil for a blob: no one owns
    /// one), of a message's or blob's `author`, and of a blob's unacknowledged `recipients`.
    static func roles(principal: String, owner: String?, author: String?, recipients: Set<String>) -> Set<AccessRole> {
        var roles: Set<AccessRole> = [.signedIn]
        if let owner, principal == owner { roles.insert(.owner) }
        if let author, principal == author { roles.insert(.author) }
        if recipients.contains(principal) { roles.insert(.recipient) }
        return roles
    }

    /// Whether the signed-in `principal` may perform `operation` on `resource` in `owner`'s
    /// space. `author` is the stamped author of the message concerned, when it exists.
    public func allows(_ operation: AccessOperation, _ resource: AccessResource, principal: String, owner: String,
                       author: String? = nil) -> Bool {
        allows(operation, resource, roles: Self.roles(principal: principal, owner: owner, author: author, recipients: []))
    }

    /// Whether the signed-in `principal` may perform `operation` on a blob of `author` that
    /// `recipients` (those that have not acknowledged it) may read.
    public func allows(_ operation: AccessOperation, blobOf author: String, recipients: Set<String>, principal: String) -> Bool {
        allows(operation, .blob, roles: Self.roles(principal: principal, owner: nil, author: author, recipients: recipients))
    }

    /// Whether the signed-in `principal` may perform `operation` on a resource no one owns
    /// (``AccessResource/pushService``): only what the table gives every signed-in user.
    public func allows(_ operation: AccessOperation, _ resource: AccessResource, principal: String) -> Bool {
        allows(operation, resource, roles: Self.roles(principal: principal, owner: nil, author: nil, recipients: []))
    }

    /// Whether `principal` may know that a blob exists: those who may read it. Everyone else
    /// gets the answer of a blob that does not exist (404), whatever they asked to do.
    public func isParty(toBlobOf author: String, recipients: Set<String>, principal: String) -> Bool {
        allows(.read, blobOf: author, recipients: recipients, principal: principal)
    }

    private func allows(_ operation: AccessOperation, _ resource: AccessResource, roles: Set<AccessRole>) -> Bool {
        guard let allowed = table[resource]?[operation] else { return false }
        return !allowed.isDisjoint(with: roles)
    }

    /// A copy that also lets `role` perform `operation` on `resource`: for tests that need a
    /// relay with a hole in its rules.
    func granting(_ operation: AccessOperation, _ resource: AccessResource, to role: AccessRole) -> AccessRules {
        var table = table
        table[resource, default: [:]][operation, default: []].insert(role)
        return AccessRules(table: table)
    }
}
