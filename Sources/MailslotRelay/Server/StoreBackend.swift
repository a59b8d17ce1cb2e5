/// Where a relay keeps its records (docs/architecture.md, "Store"): the one choice of backend,
/// made from the settings (``RelayConfiguration/storeBackend``: `--database-url` /
/// `MAILSLOT_DATABASE_URL` set or not), so that code asks which backend it has rather than
/// whether a URL is present.
public enum StoreBackend: Sendable, Equatable, CustomStringConvertible {
    /// The embedded SQLite database at `path` (`relay.sqlite` in the data folder): one relay.
    case sqlite(path: String)
    /// A PostgreSQL database that several relays may share. The URL carries a password: it is
    /// never logged (``description`` leaves it out).
    case postgresql(url: String)

    /// Whether other relays may share the records (and so must share the blob bytes too).
    public var isShared: Bool {
        switch self {
        case .sqlite: false
        case .postgresql: true
        }
    }

    /// `sqlite` or `postgresql`: what the start-up log line says, without the URL.
    public var description: String {
        switch self {
        case .sqlite: "sqlite"
        case .postgresql: "postgresql"
        }
    }
}
