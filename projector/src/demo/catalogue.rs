//! The raw material: countries with their names, places and number formats, currencies,
//! and the product and service catalogue the items are drawn from.

use std::collections::BTreeSet;

use lectern_schema::events::ItemType;

use super::{created_at, ContactRecord, ItemRecord, Price, Prng};

/// A city: name, postal code, telephone area code (or number prefix).
pub(super) type City = (&'static str, &'static str, &'static str);

/// Where a contact is based, and how that country writes names, numbers and addresses.
#[derive(Debug)]
pub(super) struct Country {
    code: &'static str,
    /// English name, closing the address line.
    name: &'static str,
    /// Share of contacts, out of the sum of all weights.
    weight: usize,
    first_names: &'static [&'static str],
    last_names: &'static [&'static str],
    trades: &'static [&'static str],
    /// "Transports Martin" rather than "Martin Transports".
    trade_first: bool,
    legal_forms: &'static [&'static str],
    streets: &'static [&'static str],
    pub(super) cities: &'static [City],
    /// Local parts of a company's billing address.
    pub(super) mailboxes: &'static [&'static str],
}

#[rustfmt::skip]
pub(super) static COUNTRIES: [Country; 10] = [
    Country {
        code: "DE",
        name: "Germany",
        weight: 22,
        first_names: &["Anna", "Lukas", "Sophie", "Jonas", "Marie", "Felix", "Lena", "Maximilian", "Julia",
            "Tobias", "Katrin", "Matthias"],
        last_names: &["Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Hoffmann",
            "Schäfer", "Koch", "Richter", "Klein", "Wolf", "Neumann", "Zimmermann"],
        trades: &["Maschinenbau", "Logistik", "Elektrotechnik", "Holzbau", "Druckerei", "Metallbau", "Haustechnik",
            "Bürobedarf", "Softwareentwicklung", "Steuerberatung", "Gebäudereinigung", "Feinkost"],
        trade_first: false,
        legal_forms: &["GmbH", "GmbH", "GmbH & Co. KG", "AG", "KG", "e.K."],
        streets: &["Hauptstraße", "Bahnhofstraße", "Lindenallee", "Gartenweg", "Schillerstraße", "Industriestraße",
            "Am Markt", "Friedrichstraße"],
        cities: &[("Berlin", "10115", "30"), ("München", "80331", "89"), ("Hamburg", "20095", "40"),
            ("Köln", "50667", "221"), ("Frankfurt am Main", "60311", "69"), ("Stuttgart", "70173", "711"),
            ("Leipzig", "04109", "341"), ("Düsseldorf", "40213", "211")],
        mailboxes: &["rechnung", "buchhaltung", "info", "kontakt"],
    },
    Country {
        code: "AT",
        name: "Austria",
        weight: 7,
        first_names: &["Florian", "Katharina", "Stefan", "Theresa", "Andreas", "Magdalena", "Lukas", "Elisabeth",
            "Georg", "Johanna"],
        last_names: &["Gruber", "Huber", "Bauer", "Wagner", "Pichler", "Steiner", "Moser", "Mayer", "Hofer",
            "Leitner", "Berger", "Fuchs"],
        trades: &["Tischlerei", "Installationen", "Bau", "Transporte", "Weinhandel", "Elektro", "Reisen",
            "Spedition", "Kaffeerösterei"],
        trade_first: false,
        legal_forms: &["GmbH", "GmbH", "KG", "OG", "e.U."],
        streets: &["Mariahilfer Straße", "Landstraßer Hauptstraße", "Herrengasse", "Schulgasse", "Kirchenplatz",
            "Linzer Straße"],
        cities: &[("Wien", "1010", "1"), ("Graz", "8010", "316"), ("Linz", "4020", "732"),
            ("Salzburg", "5020", "662"), ("Innsbruck", "6020", "512")],
        mailboxes: &["office", "rechnung", "buchhaltung"],
    },
    Country {
        code: "CH",
        name: "Switzerland",
        weight: 8,
        first_names: &["Luca", "Laura", "Noah", "Mia", "Reto", "Sandra", "Beat", "Corinne", "Nicolas", "Chiara"],
        last_names: &["Müller", "Meier", "Schmid", "Keller", "Weber", "Huber", "Brunner", "Baumann", "Frei",
            "Favre", "Rochat", "Moser"],
        trades: &["Uhren", "Treuhand", "Informatik", "Bau", "Käserei", "Haustechnik", "Schreinerei", "Immobilien"],
        trade_first: false,
        legal_forms: &["AG", "AG", "GmbH", "SA", "Sàrl"],
        streets: &["Bahnhofstrasse", "Seestrasse", "Dorfstrasse", "Rue du Rhône", "Marktgasse", "Kirchweg"],
        cities: &[("Zürich", "8001", "44"), ("Bern", "3011", "31"), ("Basel", "4051", "61"),
            ("Genève", "1204", "22"), ("Lausanne", "1003", "21"), ("Luzern", "6003", "41")],
        mailboxes: &["info", "buchhaltung", "finance"],
    },
    Country {
        code: "FR",
        name: "France",
        weight: 11,
        first_names: &["Camille", "Louis", "Chloé", "Hugo", "Manon", "Lucas", "Léa", "Thomas", "Inès", "Julien",
            "Sophie", "Antoine"],
        last_names: &["Martin", "Bernard", "Dubois", "Thomas", "Robert", "Richard", "Petit", "Durand", "Leroy",
            "Moreau", "Simon", "Laurent", "Lefèvre", "Fontaine"],
        trades: &["Transports", "Boulangerie", "Menuiserie", "Imprimerie", "Cabinet", "Atelier", "Garage",
            "Éditions", "Conseil", "Maison"],
        trade_first: true,
        legal_forms: &["SARL", "SAS", "SAS", "SA", "EURL"],
        streets: &["rue de la République", "avenue Jean Jaurès", "boulevard Voltaire", "rue Victor Hugo",
            "place de la Mairie", "rue du Commerce", "quai des Chartrons"],
        cities: &[("Paris", "75011", "1"), ("Lyon", "69002", "4"), ("Marseille", "13001", "4"),
            ("Bordeaux", "33000", "5"), ("Lille", "59000", "3"), ("Nantes", "44000", "2"),
            ("Toulouse", "31000", "5")],
        mailboxes: &["comptabilite", "factures", "contact"],
    },
    Country {
        code: "GB",
        name: "United Kingdom",
        weight: 12,
        first_names: &["Oliver", "Amelia", "George", "Isla", "Harry", "Emily", "Jack", "Charlotte", "James",
            "Sophie", "William", "Grace"],
        last_names: &["Smith", "Jones", "Taylor", "Brown", "Williams", "Wilson", "Johnson", "Davies", "Evans",
            "Roberts", "Walker", "Wright", "Whitfield", "Hughes"],
        trades: &["Joinery", "Consulting", "Logistics", "Print", "Engineering", "Catering", "Electrical",
            "Building Supplies", "Software", "Design"],
        trade_first: false,
        legal_forms: &["Ltd", "Ltd", "Limited", "LLP"],
        streets: &["High Street", "Station Road", "Church Lane", "Victoria Road", "Mill Lane", "King Street",
            "Park Avenue"],
        // Ofcom's ranges reserved for drama: numbers that reach nobody.
        cities: &[("London", "EC1A 1BB", "20 7946 0"), ("Manchester", "M1 1AE", "161 496 0"),
            ("Birmingham", "B1 1BB", "121 496 0"), ("Leeds", "LS1 4DY", "113 496 0"),
            ("Bristol", "BS1 4ST", "117 496 0"), ("Edinburgh", "EH1 1YZ", "131 496 0")],
        mailboxes: &["accounts", "invoices", "finance", "hello"],
    },
    Country {
        code: "SE",
        name: "Sweden",
        weight: 8,
        first_names: &["Erik", "Anna", "Lars", "Karin", "Johan", "Maria", "Oskar", "Elin", "Nils", "Ingrid", "Axel",
            "Sara"],
        last_names: &["Andersson", "Johansson", "Karlsson", "Nilsson", "Eriksson", "Larsson", "Olsson", "Persson",
            "Lindqvist", "Berg", "Lindgren", "Svensson"],
        trades: &["Bygg", "Konsult", "Transport", "Data", "Måleri", "El", "Trä", "Design", "Fastigheter"],
        trade_first: false,
        legal_forms: &["AB", "AB", "AB", "HB"],
        streets: &["Storgatan", "Drottninggatan", "Kungsgatan", "Sveavägen", "Vasagatan", "Skolgatan",
            "Östra Hamngatan"],
        cities: &[("Stockholm", "111 52", "8"), ("Göteborg", "411 06", "31"), ("Malmö", "211 22", "40"),
            ("Uppsala", "753 20", "18"), ("Västerås", "722 15", "21")],
        mailboxes: &["faktura", "ekonomi", "info"],
    },
    Country {
        code: "US",
        name: "USA",
        weight: 12,
        first_names: &["James", "Mary", "Michael", "Jennifer", "David", "Linda", "Robert", "Sarah", "Daniel",
            "Emily", "Chris", "Ashley"],
        last_names: &["Johnson", "Miller", "Davis", "Garcia", "Rodriguez", "Martinez", "Anderson", "Taylor",
            "Thompson", "Harper", "Brooks", "Carter", "Bennett"],
        trades: &["Logistics", "Supply", "Consulting Group", "Software", "Manufacturing", "Design Studio",
            "Freight", "Coffee Roasters", "Print Works"],
        trade_first: false,
        legal_forms: &["Inc.", "Inc.", "LLC", "Corp."],
        streets: &["Main Street", "Oak Avenue", "Maple Drive", "Market Street", "Broadway", "Elm Street",
            "5th Avenue", "Lake Shore Drive"],
        // 555-0100 to 555-0199: the numbers reserved for fiction.
        cities: &[("New York", "NY 10001", "212"), ("Chicago", "IL 60601", "312"), ("Austin", "TX 78701", "512"),
            ("Seattle", "WA 98101", "206"), ("Boston", "MA 02108", "617"), ("Denver", "CO 80202", "303"),
            ("San Francisco", "CA 94105", "415")],
        mailboxes: &["billing", "accounts", "ap", "info"],
    },
    Country {
        code: "NL",
        name: "Netherlands",
        weight: 8,
        first_names: &["Daan", "Emma", "Sem", "Julia", "Lucas", "Tess", "Bram", "Sanne", "Thijs", "Fleur"],
        last_names: &["de Jong", "Jansen", "de Vries", "van den Berg", "van Dijk", "Bakker", "Visser", "Smit",
            "Meijer", "de Boer", "Mulder", "Bos"],
        trades: &["Installatietechniek", "Transport", "Bouw", "ICT", "Advies", "Schilderwerken", "Groothandel",
            "Drukkerij"],
        trade_first: false,
        legal_forms: &["B.V.", "B.V.", "V.O.F."],
        streets: &["Kerkstraat", "Dorpsstraat", "Stationsweg", "Molenweg", "Keizersgracht", "Marktplein"],
        cities: &[("Amsterdam", "1012 AB", "20"), ("Rotterdam", "3011 AD", "10"), ("Utrecht", "3511 AX", "30"),
            ("Den Haag", "2511 BT", "70"), ("Eindhoven", "5611 AB", "40")],
        mailboxes: &["administratie", "facturen", "info"],
    },
    Country {
        code: "ES",
        name: "Spain",
        weight: 6,
        first_names: &["Lucía", "Hugo", "Martina", "Pablo", "Sofía", "Daniel", "Carmen", "Javier", "Elena",
            "Alejandro"],
        last_names: &["García", "Rodríguez", "González", "Fernández", "López", "Martínez", "Sánchez", "Pérez",
            "Gómez", "Ruiz"],
        trades: &["Construcciones", "Distribuciones", "Transportes", "Talleres", "Asesoría", "Gráficas",
            "Suministros"],
        trade_first: true,
        legal_forms: &["S.L.", "S.L.", "S.A."],
        streets: &["Calle Mayor", "Gran Vía", "Calle de Alcalá", "Avenida de la Constitución", "Paseo de Gracia",
            "Calle Real"],
        cities: &[("Madrid", "28013", "91"), ("Barcelona", "08007", "93"), ("Valencia", "46002", "96"),
            ("Sevilla", "41001", "95"), ("Bilbao", "48001", "94")],
        mailboxes: &["administracion", "facturacion", "info"],
    },
    Country {
        code: "IT",
        name: "Italy",
        weight: 6,
        first_names: &["Giulia", "Francesco", "Sofia", "Alessandro", "Aurora", "Lorenzo", "Martina", "Matteo",
            "Chiara", "Marco"],
        last_names: &["Rossi", "Russo", "Ferrari", "Esposito", "Bianchi", "Romano", "Colombo", "Ricci", "Marino",
            "Greco"],
        trades: &["Officine", "Trasporti", "Costruzioni", "Tipografia", "Studio", "Forniture", "Torrefazione"],
        trade_first: true,
        legal_forms: &["S.r.l.", "S.r.l.", "S.p.A.", "S.n.c."],
        streets: &["Via Roma", "Via Garibaldi", "Corso Italia", "Via Dante", "Piazza del Duomo", "Via Mazzini"],
        cities: &[("Milano", "20121", "02"), ("Roma", "00184", "06"), ("Torino", "10121", "011"),
            ("Bologna", "40121", "051"), ("Firenze", "50122", "055"), ("Napoli", "80133", "081")],
        mailboxes: &["amministrazione", "fatture", "info"],
    },
];

/// Mailbox providers of people who have no company domain.
const PROVIDERS: &[&str] = &["mail.example", "post.example", "inbox.example"];

impl Country {
    /// A number in `city`, written the country's way with its calling code.
    pub(super) fn phone(&self, rng: &mut Prng, city: City) -> String {
        let area = city.2;
        match self.code {
            "DE" => format!("+49 {area} {}", rng.digits(7)),
            "AT" => format!("+43 {area} {}", rng.digits(6)),
            "CH" => format!("+41 {area} {} {} {}", rng.digits(3), rng.digits(2), rng.digits(2)),
            "FR" => format!("+33 {area} {} {} {} {}", rng.digits(2), rng.digits(2), rng.digits(2), rng.digits(2)),
            "GB" => format!("+44 {area}{}", rng.digits(3)),
            "US" => format!("+1 {area}-555-01{:02}", rng.below(100)),
            "NL" => format!("+31 {area} {} {}", rng.digits(3), rng.digits(4)),
            "ES" => format!("+34 {area} {} {} {}", rng.digits(3), rng.digits(2), rng.digits(2)),
            "IT" => format!("+39 {area} {}", rng.digits(7)),
            // SE
            _ => format!("+46 {area} {} {} {}", rng.digits(3), rng.digits(2), rng.digits(2)),
        }
    }

    /// A one-line postal address in `city`, in the country's order.
    pub(super) fn address(&self, rng: &mut Prng, city: City) -> String {
        let (town, postal, _) = city;
        let street = rng.pick(self.streets);
        let country = self.name;
        match self.code {
            "FR" => format!("{} {street}, {postal} {town}, {country}", rng.between(1, 140)),
            "GB" => format!("{} {street}, {town} {postal}, {country}", rng.between(1, 240)),
            "US" => format!("{} {street}, {town}, {postal}, {country}", rng.between(100, 9_800)),
            _ => format!("{street} {}, {postal} {town}, {country}", rng.between(1, 160)),
        }
    }

    /// A tax number shaped as the country's authority issues it: VAT ids in Europe,
    /// an EIN in the US. People in countries whose VAT id would be derived from a
    /// personal number get none.
    fn tin(&self, rng: &mut Prng, person: bool) -> Option<String> {
        if person && (matches!(self.code, "US" | "SE" | "ES") || !rng.chance(35)) {
            return None;
        }
        Some(match self.code {
            "DE" => format!("DE{}", rng.digits(9)),
            "AT" => format!("ATU{}", rng.digits(8)),
            "CH" => format!("CHE-{}.{}.{} MWST", rng.digits(3), rng.digits(3), rng.digits(3)),
            "FR" => {
                // The key the French authority computes from the SIREN.
                let siren = rng.between(100_000_000, 999_999_999);
                format!("FR{:02}{siren}", (12 + 3 * (siren % 97)) % 97)
            }
            "GB" => format!("GB{}", rng.digits(9)),
            "SE" => format!("SE556{}01", rng.digits(7)),
            "US" => format!("{}-{}", rng.digits(2), rng.digits(7)),
            "NL" => format!("NL{}B01", rng.digits(9)),
            "ES" => format!("ESB{}", rng.digits(8)),
            // IT
            _ => format!("IT{}", rng.digits(11)),
        })
    }
}

fn country(rng: &mut Prng) -> &'static Country {
    let mut roll = rng.below(COUNTRIES.iter().map(|country| country.weight).sum());
    for country in &COUNTRIES {
        if roll < country.weight {
            return country;
        }
        roll -= country.weight;
    }
    &COUNTRIES[0]
}

/// `records` contacts with distinct names: about three in four companies, the rest
/// people (sole traders); 55 % customers only, 30 % suppliers only, 15 % both.
pub(super) fn contacts(rng: &mut Prng, records: usize) -> Vec<ContactRecord> {
    let mut names = BTreeSet::new();
    (0..records).map(|index| contact(rng, index, records, &mut names)).collect()
}

fn contact(rng: &mut Prng, index: usize, records: usize, names: &mut BTreeSet<String>) -> ContactRecord {
    let country = country(rng);
    let person = rng.chance(25);
    let mut attempt = 0;
    let (name, domain, email) = loop {
        attempt += 1;
        let (name, domain, email) = if person {
            let (first, last) = (rng.pick(country.first_names), rng.pick(country.last_names));
            let email = format!("{}.{}@{}", slug(first), slug(last).replace('-', ""), rng.pick(PROVIDERS));
            (format!("{first} {last}"), None, email)
        } else {
            let core = company_core(rng, country);
            let domain = format!("{}.example", slug(&core));
            let email = format!("{}@{domain}", rng.pick(country.mailboxes));
            (capitalised(&format!("{core} {}", rng.pick(country.legal_forms))), Some(domain), email)
        };
        if names.insert(name.clone()) || attempt > 50 {
            break (name, domain, email);
        }
    };
    let city = rng.pick(country.cities);
    let role = rng.below(100);
    ContactRecord {
        name,
        email: (!rng.chance(4)).then_some(email),
        phone: (!rng.chance(10)).then(|| country.phone(rng, city)),
        address: (!rng.chance(if person { 15 } else { 5 })).then(|| country.address(rng, city)),
        tin: if person || !rng.chance(5) { country.tin(rng, person) } else { None },
        is_customer: !(55..85).contains(&role),
        is_supplier: role >= 55,
        created_at: created_at(rng, index, records),
        country,
        city,
        domain,
    }
}

/// A company's name without its legal form: "Becker Metallbau", "Transports Martin",
/// "Smith & Hughes".
fn company_core(rng: &mut Prng, country: &Country) -> String {
    let last = rng.below(country.last_names.len());
    let surname = |index: usize| country.last_names.get(index).copied().unwrap_or_default();
    let trade = rng.pick(country.trades);
    if rng.chance(15) {
        let other = (last + 1 + rng.below(country.last_names.len() - 1)) % country.last_names.len();
        format!("{} & {}", surname(last), surname(other))
    } else if country.trade_first {
        format!("{trade} {}", surname(last))
    } else {
        format!("{} {trade}", surname(last))
    }
}

/// "de Jong Bouw B.V." starts a sentence, so "De Jong Bouw B.V.".
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// Lower-case ASCII for mail domains: "Müller & Söhne" → "mueller-soehne".
fn slug(text: &str) -> String {
    let mut slug = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        let ascii = match c {
            'ä' | 'æ' => "ae",
            'ö' | 'ø' => "oe",
            'ü' => "ue",
            'ß' => "ss",
            'à' | 'á' | 'â' | 'å' | 'ã' => "a",
            'é' | 'è' | 'ê' | 'ë' => "e",
            'í' | 'ì' | 'î' | 'ï' => "i",
            'ó' | 'ò' | 'ô' => "o",
            'ú' | 'ù' | 'û' => "u",
            'ç' => "c",
            'ñ' => "n",
            c if c.is_ascii_alphanumeric() => {
                slug.push(c);
                continue;
            }
            _ => "-",
        };
        if ascii != "-" {
            slug.push_str(ascii);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.trim_end_matches('-').to_owned()
}

/// An ISO 4217 currency: its minor-unit places and a rough rate against the euro.
#[derive(Debug)]
pub(super) struct Currency {
    pub(super) code: &'static str,
    /// ISO 4217 minor units: 2 for the euro, 0 for the yen.
    pub(super) decimals: u32,
    /// Units of this currency per euro, times 1 000.
    per_euro_milli: i64,
    weight: usize,
}

static CURRENCIES: [Currency; 8] = [
    Currency { code: "EUR", decimals: 2, per_euro_milli: 1_000, weight: 40 },
    Currency { code: "USD", decimals: 2, per_euro_milli: 1_080, weight: 14 },
    Currency { code: "GBP", decimals: 2, per_euro_milli: 850, weight: 12 },
    Currency { code: "SEK", decimals: 2, per_euro_milli: 11_500, weight: 10 },
    Currency { code: "CHF", decimals: 2, per_euro_milli: 950, weight: 10 },
    Currency { code: "DKK", decimals: 2, per_euro_milli: 7_460, weight: 4 },
    Currency { code: "NOK", decimals: 2, per_euro_milli: 11_700, weight: 4 },
    Currency { code: "JPY", decimals: 0, per_euro_milli: 162_000, weight: 6 },
];

fn currency(rng: &mut Prng) -> &'static Currency {
    let mut roll = rng.below(CURRENCIES.iter().map(|currency| currency.weight).sum());
    for currency in &CURRENCIES {
        if roll < currency.weight {
            return currency;
        }
        roll -= currency.weight;
    }
    &CURRENCIES[0]
}

/// Euro cents in `currency`'s minor units.
fn convert(euro_cents: i64, currency: &Currency) -> i64 {
    euro_cents * currency.per_euro_milli * 10_i64.pow(currency.decimals) / 100_000
}

/// A shelf price: 4.99, 24.90, 149.00, 1490.00; in yen 320 or 4980. Credits alike.
pub(super) fn round_price(minor: i64, currency: &Currency) -> i64 {
    let magnitude = minor.abs();
    let rounded = if currency.decimals == 0 {
        if magnitude < 1_000 {
            (magnitude / 10 * 10).max(10)
        } else {
            magnitude / 100 * 100 + 80
        }
    } else if magnitude < 1_000 {
        magnitude / 10 * 10 + 9
    } else if magnitude < 10_000 {
        magnitude / 100 * 100 + 90
    } else if magnitude < 100_000 {
        magnitude / 100 * 100
    } else {
        magnitude / 1_000 * 1_000
    };
    rounded * minor.signum()
}

/// One line of the catalogue: a product or service in several variants.
#[derive(Debug)]
pub(super) struct Template {
    sku_prefix: &'static str,
    name: &'static str,
    variants: &'static [&'static str],
    kind: ItemType,
    unit: Option<&'static str>,
    /// Sale price range in euro cents; negative for credits.
    euro_cents: (i64, i64),
    pub(super) description: &'static str,
}

const fn product(
    sku_prefix: &'static str,
    name: &'static str,
    variants: &'static [&'static str],
    unit: &'static str,
    euro_cents: (i64, i64),
    description: &'static str,
) -> Template {
    Template { sku_prefix, name, variants, kind: ItemType::Product, unit: Some(unit), euro_cents, description }
}

const fn service(
    name: &'static str,
    variants: &'static [&'static str],
    unit: Option<&'static str>,
    euro_cents: (i64, i64),
    description: &'static str,
) -> Template {
    Template { sku_prefix: "SRV", name, variants, kind: ItemType::Service, unit, euro_cents, description }
}

#[rustfmt::skip]
pub(super) static TEMPLATES: &[Template] = &[
    product("OFF", "Ergonomic office chair", &["black", "grey", "blue", "mesh back", "with headrest"], "pcs",
        (18_900, 49_900), "Adjustable seat height, lumbar support and armrests; 5-year warranty."),
    product("OFF", "Height-adjustable desk", &["120×70 cm", "140×80 cm", "160×80 cm", "180×90 cm"], "pcs",
        (34_900, 89_900), "Electric lift with memory presets, steel frame, oak-veneer top."),
    product("OFF", "Copy paper A4 80 g/m²", &["500 sheets", "box of 5 reams", "recycled, 500 sheets"], "pack",
        (499, 2_999), "FSC-certified, for laser and inkjet printers."),
    product("OFF", "Lever arch file",
        &["A4, 80 mm, blue", "A4, 80 mm, black", "A4, 50 mm, red", "A4, 50 mm, green"], "pcs", (199, 549),
        "Cardboard with PP cover, metal edge protection."),
    product("OFF", "Whiteboard", &["90×60 cm", "120×90 cm", "180×120 cm"], "pcs", (4_900, 24_900),
        "Magnetic enamelled steel surface, aluminium frame."),
    product("OFF", "Ballpoint pens", &["blue, pack of 10", "black, pack of 10", "assorted, pack of 20"], "pack",
        (299, 1_299), "Retractable, refillable, medium tip."),
    product("OFF", "Notebook A5", &["dotted", "lined", "squared", "blank"], "pcs", (299, 1_499),
        "96 sheets, 100 g/m² paper, elastic closure."),
    product("OFF", "Desk lamp LED", &["black", "white", "with wireless charger"], "pcs", (2_900, 8_900),
        "Dimmable, adjustable colour temperature."),
    product("OFF", "Toner cartridge", &["black, standard yield", "black, high yield", "cyan", "magenta", "yellow"],
        "pcs", (4_900, 15_900), "Compatible with the office laser printers we supply."),
    product("ITH", "Business laptop 14\"", &["16 GB / 512 GB", "32 GB / 1 TB", "32 GB / 2 TB, LTE"], "pcs",
        (89_900, 189_900), "Lightweight aluminium chassis, 3-year on-site warranty."),
    product("ITH", "USB-C docking station", &["dual HDMI", "Thunderbolt 4", "compact travel"], "pcs",
        (8_900, 29_900), "Charges the laptop, drives two displays, gigabit Ethernet."),
    product("ITH", "Monitor 27\"", &["QHD", "4K UHD", "4K with USB-C"], "pcs", (22_900, 64_900),
        "IPS panel, height-adjustable stand, VESA mount."),
    product("ITH", "Wireless keyboard and mouse set",
        &["German layout", "UK layout", "US layout", "Nordic layout", "French layout", "Swiss layout"], "set",
        (3_900, 12_900), "Quiet keys, one USB receiver for both."),
    product("ITH", "NVMe SSD", &["500 GB", "1 TB", "2 TB", "4 TB"], "pcs", (4_900, 29_900),
        "PCIe 4.0, M.2 2280, 5-year warranty."),
    product("ITH", "Network switch", &["8-port", "16-port PoE", "24-port managed", "48-port managed"], "pcs",
        (3_900, 89_900), "Gigabit, fanless, rack-mountable."),
    product("ITH", "Headset with noise cancelling", &["wired USB", "Bluetooth", "DECT"], "pcs", (5_900, 29_900),
        "Certified for the common meeting platforms."),
    product("ITH", "HDMI cable", &["1 m", "2 m", "5 m", "10 m"], "pcs", (599, 2_499), "HDMI 2.1, 48 Gbit/s."),
    product("ITH", "Smartphone", &["128 GB", "256 GB", "512 GB"], "pcs", (39_900, 109_900),
        "Dual SIM, enrolled in device management on request."),
    product("ITH", "Webcam", &["Full HD", "4K with ring light"], "pcs", (4_900, 19_900),
        "Privacy shutter, two microphones."),
    product("ITH", "Wi-Fi access point", &["Wi-Fi 6", "Wi-Fi 6E", "outdoor"], "pcs", (9_900, 34_900),
        "PoE powered, central management."),
    product("CAF", "Espresso beans",
        &["Brazil Santos", "Ethiopia Sidamo", "house blend", "decaf", "Colombia Huila"], "kg", (1_890, 3_990),
        "Roasted weekly, delivered within ten days of roasting."),
    product("CAF", "Filter coffee, organic", &["Colombia", "Guatemala", "Peru", "Honduras"], "kg", (1_490, 2_990),
        "Certified organic, medium roast."),
    product("CAF", "Oat drink, barista", &["1 l", "carton of 6 × 1 l"], "carton", (199, 1_499),
        "Foams like milk, no added sugar."),
    product("CAF", "Paper cups", &["200 ml, 50 pcs", "300 ml, 50 pcs", "400 ml, 50 pcs"], "pack", (399, 999),
        "Compostable lining."),
    product("CAF", "Green tea", &["sencha", "jasmine", "matcha", "genmaicha"], "pack", (490, 2_990),
        "Loose leaf, 250 g."),
    product("CAF", "Mineral water", &["still, crate of 12", "sparkling, crate of 12"], "crate", (599, 1_299),
        "Glass bottles, deposit charged separately."),
    product("PKG", "Shipping carton", &["30×20×15 cm", "40×30×20 cm", "60×40×40 cm", "double-walled 60×40×40 cm"],
        "pcs", (79, 449), "Corrugated board, recyclable."),
    product("PKG", "Stretch film", &["500 mm × 300 m", "450 mm × 250 m"], "roll", (1_299, 2_499),
        "23 µm, for hand wrapping."),
    product("PKG", "Euro pallet", &["new", "used, grade A"], "pcs", (1_200, 2_800), "1200×800 mm, EPAL certified."),
    product("PKG", "Packing tape", &["brown, 50 m", "clear, 66 m", "printed \"Fragile\", 66 m"], "roll", (199, 699),
        "Low-noise polypropylene."),
    product("PKG", "Bubble wrap", &["50 cm × 100 m", "100 cm × 50 m"], "roll", (1_999, 4_999),
        "Small bubbles, perforated every 30 cm."),
    product("PKG", "Padded envelopes", &["C5, 100 pcs", "C4, 50 pcs", "B4, 50 pcs"], "pack", (1_499, 3_499),
        "Self-sealing, paper padding."),
    product("MAT", "Oak plank", &["20 mm, 2 m", "27 mm, 2 m", "40 mm, 3 m"], "pcs", (2_900, 12_900),
        "Kiln-dried, planed on four sides."),
    product("MAT", "Stainless steel sheet 1.4301", &["1 mm", "2 mm", "3 mm"], "m²", (4_900, 14_900),
        "Brushed finish, cut to size on request."),
    product("MAT", "Copper pipe", &["15 mm", "22 mm", "28 mm"], "m", (690, 1_890),
        "For drinking water and heating installations."),
    product("MAT", "Installation cable NYM-J", &["3×1.5 mm²", "5×1.5 mm²", "5×2.5 mm²"], "m", (89, 299),
        "Sold by the metre from the drum."),
    product("MAT", "Wood screws", &["4×40 mm, box of 200", "5×60 mm, box of 100", "6×80 mm, box of 50"], "box",
        (499, 1_499), "Zinc-plated, Torx drive."),
    product("MAT", "Wall paint, matt white", &["2.5 l", "10 l", "12.5 l"], "bucket", (1_999, 6_999),
        "Low-emission, high coverage."),
    product("MAT", "Birch plywood", &["12 mm", "18 mm", "24 mm"], "m²", (1_900, 5_900),
        "Exterior-grade glue, sanded."),
    product("MAT", "Safety gloves", &["size 8", "size 9", "size 10", "size 11"], "pair", (399, 1_299),
        "Cut resistance level C, touchscreen tips."),
    product("MAT", "LED panel 62×62 cm", &["3000 K", "4000 K", "6500 K"], "pcs", (2_900, 7_900),
        "For suspended ceilings, flicker-free driver."),
    product("MAT", "Cordless drill 18 V", &["body only", "with 2 batteries", "with 2 batteries and case"], "pcs",
        (8_900, 29_900), "Brushless motor, two gears."),
    service("Consulting", &["junior", "senior", "partner", "expert witness"], Some("hour"), (9_000, 25_000),
        "Billed per started hour."),
    service("On-site installation", &["standard", "evening", "weekend"], Some("hour"), (6_500, 12_000),
        "Technician on site, travel billed separately."),
    service("Project management", &["IT projects", "construction", "events"], Some("day"), (65_000, 140_000),
        "Planning, coordination and reporting."),
    service("Workshop facilitation", &["half day", "full day"], Some("session"), (90_000, 240_000),
        "Preparation and written results included."),
    service("Monthly bookkeeping", &["up to 100 entries", "up to 500 entries", "unlimited entries"], Some("month"),
        (19_000, 89_000), "Bank reconciliation, VAT return, monthly report."),
    service("Payroll processing", &["per employee", "per employee, with pension reporting"], Some("month"),
        (1_500, 3_500), "Payslips, filings and year-end reporting."),
    service("Annual financial statement", &["sole trader", "partnership", "limited company"], None,
        (90_000, 450_000), "Balance sheet, profit and loss, notes."),
    service("Tax return preparation", &["individual", "company"], None, (25_000, 180_000),
        "Prepared and filed electronically."),
    service("Website hosting", &["basic", "business", "e-commerce"], Some("month"), (900, 9_900),
        "Daily backups, TLS certificates, 99.9 % uptime."),
    service("Managed backup", &["100 GB", "1 TB", "5 TB"], Some("month"), (1_500, 14_900),
        "Encrypted, stored in two EU data centres."),
    service("Cloud server", &["2 vCPU / 4 GB", "4 vCPU / 16 GB", "8 vCPU / 32 GB"], Some("month"), (1_900, 24_900),
        "Hosted in the EU, monitoring included."),
    service("Software licence", &["per seat", "team of 10", "enterprise"], Some("month"), (900, 89_000),
        "Updates and standard support included."),
    service("Translation",
        &["German → English", "English → French", "Swedish → English", "Spanish → German", "Italian → English"],
        Some("page"), (2_500, 4_500), "Standard page of 1 500 characters, proofread."),
    service("Express courier", &["same day, city", "next day, national", "48 h, EU"], Some("shipment"),
        (1_500, 8_900), "Up to 30 kg, proof of delivery."),
    service("Maintenance contract", &["HVAC", "elevators", "IT hardware", "fire safety"], Some("year"),
        (49_000, 390_000), "Scheduled inspections and priority repairs."),
    service("Training day", &["Excel advanced", "first aid", "forklift licence", "data protection"], Some("day"),
        (39_000, 149_000), "Up to 12 participants, certificates included."),
    service("Premium support", &["business hours", "24/7"], Some("month"), (9_900, 99_900),
        "Response within one hour."),
    service("IT support", &["remote", "on-site"], Some("hour"), (7_500, 13_000), "Billed in 15-minute steps."),
    service("Graphic design", &["logo", "brochure", "trade fair stand"], Some("hour"), (6_500, 11_000),
        "Two rounds of revisions included."),
    service("Copywriting", &["German", "English", "French"], Some("hour"), (5_500, 9_500), "SEO review included."),
    service("Photography", &["product shoot", "corporate portraits"], Some("session"), (45_000, 160_000),
        "Edited images delivered within a week."),
    service("Office cleaning", &["daily", "twice weekly", "weekly"], Some("month"), (29_000, 240_000),
        "Materials and supervision included."),
    service("Window cleaning", &["office, monthly", "shop front, weekly"], Some("visit"), (4_500, 18_000),
        "Inside and outside, frames included."),
    service("Security audit", &["ISO 27001 readiness", "GDPR", "penetration test"], Some("day"), (110_000, 190_000),
        "Findings report with prioritised measures."),
    service("Goodwill credit", &["small", "standard"], None, (-5_000, -500), "Credited on the next invoice."),
];

/// Sentences an item's description may gain in an update.
pub(super) const REVISIONS: &[&str] = &[
    "Lead time now 2–3 working days.",
    "Now with a 3-year warranty.",
    "Price includes delivery within the EU.",
    "New supplier since 2026.",
];

/// `records` items, each a different variant of a catalogue line (so names are
/// distinct): products and services in several currencies, some without a purchase
/// price, a few bought but never sold, and credits with a negative price.
pub(super) fn items(rng: &mut Prng, records: usize) -> Vec<ItemRecord> {
    let mut lines: Vec<(usize, usize)> = TEMPLATES
        .iter()
        .enumerate()
        .flat_map(|(template, line)| (0..line.variants.len()).map(move |variant| (template, variant)))
        .collect();
    rng.shuffle(&mut lines);
    lines
        .into_iter()
        .take(records)
        .enumerate()
        .filter_map(|(index, (template, variant))| {
            TEMPLATES.get(template).map(|line| item(rng, index, records, line, template, variant))
        })
        .collect()
}

fn item(
    rng: &mut Prng,
    index: usize,
    records: usize,
    template: &'static Template,
    number: usize,
    variant: usize,
) -> ItemRecord {
    let variant_name = template.variants.get(variant).copied().unwrap_or_default();
    let service = template.kind == ItemType::Service;
    let credit = template.euro_cents.1 < 0;
    // Later variants cost more: "basic" < "business" < "e-commerce", 500 GB < 1 TB.
    let (low, high) = template.euro_cents;
    let step = (high - low) / template.variants.len().max(1) as i64;
    let euro_cents = low + step * variant as i64 + rng.between(0, step);
    let sold_in = currency(rng);
    // Bought for use, never sold: only a purchase price.
    let bought_only = !service && rng.chance(4);
    let sale =
        (!bought_only).then(|| Price { minor: round_price(convert(euro_cents, sold_in), sold_in), currency: sold_in });
    let purchase = (!credit && (bought_only || !rng.chance(if service { 65 } else { 25 }))).then(|| {
        // Now and then bought from abroad, in the supplier's currency.
        let bought_in = if rng.chance(15) { currency(rng) } else { sold_in };
        Price { minor: convert(euro_cents * rng.between(45, 75) / 100, bought_in), currency: bought_in }
    });
    ItemRecord {
        name: format!("{}, {variant_name}", template.name),
        sku: (!rng.chance(if service { 20 } else { 3 }))
            .then(|| format!("{}-{}{:02}", template.sku_prefix, number + 10, variant + 1)),
        description: (!rng.chance(12)).then(|| template.description.to_owned()),
        kind: template.kind,
        unit: template.unit,
        sale,
        purchase,
        created_at: created_at(rng, index, records),
        template,
    }
}
