import MailslotTestSupport
@testable import MailslotRelay

extension TestRelay {
    /// The relay's SQLite store, for the tests that look inside it.
    var sqlite: SQLiteStore { relay.store as! SQLiteStore }
}
