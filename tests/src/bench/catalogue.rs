//! Raw material for realistic records: countries with their names, streets, number and
//! tax-id formats, and the products and services items are drawn from.

use super::prng::Prng;

/// Town, postal code, telephone area code.
pub type City = (&'static str, &'static str, &'static str);

pub struct Country {
    pub code: &'static str,
    pub name: &'static str,
    weight: usize,
    pub first_names: &'static [&'static str],
    pub last_names: &'static [&'static str],
    pub trades: &'static [&'static str],
    /// "Transports Martin" rather than "Martin Transports".
    pub trade_first: bool,
    pub legal_forms: &'static [&'static str],
    pub streets: &'static [&'static str],
    pub cities: &'static [City],
    pub mailboxes: &'static [&'static str],
    pub currency: &'static str,
}

#[rustfmt::skip]
static COUNTRIES: [Country; 7] = [
    Country { code: "DE", name: "Germany", weight: 24, currency: "EUR",
        first_names: &["Anna", "Lukas", "Sophie", "Jonas", "Marie", "Felix", "Lena", "Maximilian", "Julia", "Tobias"],
        last_names: &["Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Hoffmann",
            "Schäfer", "Koch", "Richter", "Klein", "Wolf", "Neumann", "Zimmermann", "Krüger", "Hartmann"],
        trades: &["Maschinenbau", "Logistik", "Elektrotechnik", "Holzbau", "Druckerei", "Metallbau", "Haustechnik",
            "Bürobedarf", "Softwareentwicklung", "Steuerberatung", "Gebäudereinigung", "Feinkost"],
        trade_first: false, legal_forms: &["GmbH", "GmbH", "GmbH & Co. KG", "AG", "KG", "e.K."],
        streets: &["Hauptstraße", "Bahnhofstraße", "Lindenallee", "Gartenweg", "Schillerstraße", "Industriestraße"],
        cities: &[("Berlin", "10115", "30"), ("München", "80331", "89"), ("Hamburg", "20095", "40"),
            ("Köln", "50667", "221"), ("Frankfurt am Main", "60311", "69"), ("Leipzig", "04109", "341")],
        mailboxes: &["rechnung", "buchhaltung", "info", "kontakt"] },
    Country { code: "GB", name: "United Kingdom", weight: 16, currency: "GBP",
        first_names: &["Oliver", "Amelia", "George", "Isla", "Harry", "Emily", "Jack", "Charlotte", "James", "Grace"],
        last_names: &["Smith", "Jones", "Taylor", "Brown", "Williams", "Wilson", "Johnson", "Davies", "Evans",
            "Roberts", "Walker", "Wright", "Whitfield", "Hughes", "Green", "Hall"],
        trades: &["Joinery", "Consulting", "Logistics", "Print", "Engineering", "Catering", "Electrical",
            "Building Supplies", "Software", "Design"],
        trade_first: false, legal_forms: &["Ltd", "Ltd", "Limited", "LLP"],
        streets: &["High Street", "Station Road", "Church Lane", "Victoria Road", "Mill Lane", "King Street"],
        cities: &[("London", "EC1A 1BB", "20 7946 0"), ("Manchester", "M1 1AE", "161 496 0"),
            ("Birmingham", "B1 1BB", "121 496 0"), ("Leeds", "LS1 4DY", "113 496 0"), ("Bristol", "BS1 4ST", "117 496 0")],
        mailboxes: &["accounts", "invoices", "finance", "hello"] },
    Country { code: "FR", name: "France", weight: 14, currency: "EUR",
        first_names: &["Camille", "Louis", "Chloé", "Hugo", "Manon", "Lucas", "Léa", "Thomas", "Inès", "Julien"],
        last_names: &["Martin", "Bernard", "Dubois", "Thomas", "Robert", "Richard", "Petit", "Durand", "Leroy",
            "Moreau", "Simon", "Laurent", "Lefèvre", "Fontaine"],
        trades: &["Transports", "Boulangerie", "Menuiserie", "Imprimerie", "Cabinet", "Atelier", "Garage", "Conseil"],
        trade_first: true, legal_forms: &["SARL", "SAS", "SAS", "SA", "EURL"],
        streets: &["rue de la République", "avenue Jean Jaurès", "boulevard Voltaire", "rue Victor Hugo", "rue du Commerce"],
        cities: &[("Paris", "75011", "1"), ("Lyon", "69002", "4"), ("Marseille", "13001", "4"),
            ("Bordeaux", "33000", "5"), ("Lille", "59000", "3"), ("Nantes", "44000", "2")],
        mailboxes: &["comptabilite", "factures", "contact"] },
    Country { code: "US", name: "USA", weight: 16, currency: "USD",
        first_names: &["James", "Mary", "Michael", "Jennifer", "David", "Linda", "Robert", "Sarah", "Daniel", "Ashley"],
        last_names: &["Johnson", "Miller", "Davis", "Garcia", "Rodriguez", "Martinez", "Anderson", "Taylor",
            "Thompson", "Harper", "Brooks", "Carter", "Bennett", "Foster"],
        trades: &["Logistics", "Supply", "Consulting Group", "Software", "Manufacturing", "Design Studio", "Freight"],
        trade_first: false, legal_forms: &["Inc.", "Inc.", "LLC", "Corp."],
        streets: &["Main Street", "Oak Avenue", "Maple Drive", "Market Street", "Broadway", "Elm Street"],
        cities: &[("New York", "NY 10001", "212"), ("Chicago", "IL 60601", "312"), ("Austin", "TX 78701", "512"),
            ("Seattle", "WA 98101", "206"), ("Boston", "MA 02108", "617"), ("Denver", "CO 80202", "303")],
        mailboxes: &["billing", "accounts", "ap", "info"] },
    Country { code: "NL", name: "Netherlands", weight: 10, currency: "EUR",
        first_names: &["Daan", "Emma", "Sem", "Julia", "Lucas", "Tess", "Bram", "Sanne", "Thijs", "Fleur"],
        last_names: &["de Jong", "Jansen", "de Vries", "van den Berg", "van Dijk", "Bakker", "Visser", "Smit",
            "Meijer", "de Boer", "Mulder", "Bos"],
        trades: &["Installatietechniek", "Transport", "Bouw", "ICT", "Advies", "Schilderwerken", "Groothandel"],
        trade_first: false, legal_forms: &["B.V.", "B.V.", "V.O.F."],
        streets: &["Kerkstraat", "Dorpsstraat", "Stationsweg", "Molenweg", "Keizersgracht", "Marktplein"],
        cities: &[("Amsterdam", "1012 AB", "20"), ("Rotterdam", "3011 AD", "10"), ("Utrecht", "3511 AX", "30"),
            ("Den Haag", "2511 BT", "70"), ("Eindhoven", "5611 AB", "40")],
        mailboxes: &["administratie", "facturen", "info"] },
    Country { code: "IT", name: "Italy", weight: 10, currency: "EUR",
        first_names: &["Giulia", "Francesco", "Sofia", "Alessandro", "Aurora", "Lorenzo", "Martina", "Matteo", "Marco"],
        last_names: &["Rossi", "Russo", "Ferrari", "Esposito", "Bianchi", "Romano", "Colombo", "Ricci", "Marino",
            "Greco", "Bruno", "Gallo"],
        trades: &["Officine", "Trasporti", "Costruzioni", "Tipografia", "Studio", "Forniture", "Torrefazione"],
        trade_first: true, legal_forms: &["S.r.l.", "S.r.l.", "S.p.A.", "S.n.c."],
        streets: &["Via Roma", "Via Garibaldi", "Corso Italia", "Via Dante", "Piazza del Duomo", "Via Mazzini"],
        cities: &[("Milano", "20121", "02"), ("Roma", "00184", "06"), ("Torino", "10121", "011"),
            ("Bologna", "40121", "051"), ("Firenze", "50122", "055"), ("Napoli", "80133", "081")],
        mailboxes: &["amministrazione", "fatture", "info"] },
    Country { code: "SE", name: "Sweden", weight: 10, currency: "SEK",
        first_names: &["Erik", "Anna", "Lars", "Karin", "Johan", "Maria", "Oskar", "Elin", "Nils", "Ingrid"],
        last_names: &["Andersson", "Johansson", "Karlsson", "Nilsson", "Eriksson", "Larsson", "Olsson", "Persson",
            "Lindqvist", "Berg", "Lindgren", "Svensson"],
        trades: &["Bygg", "Konsult", "Transport", "Data", "Måleri", "El", "Trä", "Design", "Fastigheter"],
        trade_first: false, legal_forms: &["AB", "AB", "AB", "HB"],
        streets: &["Storgatan", "Drottninggatan", "Kungsgatan", "Sveavägen", "Vasagatan", "Östra Hamngatan"],
        cities: &[("Stockholm", "111 52", "8"), ("Göteborg", "411 06", "31"), ("Malmö", "211 22", "40"),
            ("Uppsala", "753 20", "18"), ("Västerås", "722 15", "21")],
        mailboxes: &["faktura", "ekonomi", "info"] },
];

/// Mailbox providers of people who have no company domain.
pub const PROVIDERS: &[&str] = &["mail.example", "post.example", "inbox.example"];

pub fn country(rng: &mut Prng) -> &'static Country {
    let mut roll = rng.below(COUNTRIES.iter().map(|country| country.weight).sum());
    for country in &COUNTRIES {
        if roll < country.weight {
            return country;
        }
        roll -= country.weight;
    }
    &COUNTRIES[0]
}

impl Country {
    /// A number in `city`, with the country's calling code (fictional ranges where they exist).
    pub fn phone(&self, rng: &mut Prng, city: City) -> String {
        let area = city.2;
        match self.code {
            "DE" => format!("+49 {area} {}", rng.digits(7)),
            "GB" => format!("+44 {area}{}", rng.digits(3)),
            "FR" => format!("+33 {area} {} {} {} {}", rng.digits(2), rng.digits(2), rng.digits(2), rng.digits(2)),
            "US" => format!("+1 {area}-555-01{:02}", rng.below(100)),
            "NL" => format!("+31 {area} {} {}", rng.digits(3), rng.digits(4)),
            "IT" => format!("+39 {area} {}", rng.digits(7)),
            _ => format!("+46 {area} {} {} {}", rng.digits(3), rng.digits(2), rng.digits(2)),
        }
    }

    pub fn address(&self, rng: &mut Prng, city: City) -> String {
        let (town, postal, _) = city;
        let street = rng.pick(self.streets);
        match self.code {
            "FR" => format!("{} {street}, {postal} {town}, {}", rng.between(1, 140), self.name),
            "GB" => format!("{} {street}, {town} {postal}, {}", rng.between(1, 240), self.name),
            "US" => format!("{} {street}, {town}, {postal}, {}", rng.between(100, 9_800), self.name),
            _ => format!("{street} {}, {postal} {town}, {}", rng.between(1, 160), self.name),
        }
    }

    /// A VAT id shaped as the country's authority issues it (an EIN in the US).
    pub fn tin(&self, rng: &mut Prng) -> String {
        match self.code {
            "DE" => format!("DE{}", rng.digits(9)),
            "GB" => format!("GB{}", rng.digits(9)),
            "FR" => {
                let siren = rng.between(100_000_000, 999_999_999);
                format!("FR{:02}{siren}", (12 + 3 * (siren % 97)) % 97)
            }
            "US" => format!("{}-{}", rng.digits(2), rng.digits(7)),
            "NL" => format!("NL{}B01", rng.digits(9)),
            "IT" => format!("IT{}", rng.digits(11)),
            _ => format!("SE556{}01", rng.digits(7)),
        }
    }
}

/// A product or service: name, description, type, unit, SKU prefix, price in minor units.
pub type Template = (&'static str, &'static str, &'static str, Option<&'static str>, &'static str, i64);

#[rustfmt::skip]
pub const TEMPLATES: &[Template] = &[
    ("Oak plank, 40 mm", "Kiln-dried, planed on four sides.", "product", Some("pcs"), "MAT", 5_264),
    ("Ergonomic office chair", "Adjustable seat height, lumbar support and armrests.", "product", Some("pcs"), "OFF", 24_200),
    ("Copy paper A4, 80 g", "500 sheets per ream, FSC certified.", "product", Some("ream"), "OFF", 549),
    ("Stainless steel bolt M8", "DIN 933, A2 grade.", "product", Some("box"), "HW", 1_290),
    ("LED panel 60x60", "40 W, 4000 K, flicker-free driver.", "product", Some("pcs"), "ELE", 6_890),
    ("Espresso beans, 1 kg", "Medium roast, single origin.", "product", Some("kg"), "FD", 2_450),
    ("Safety gloves", "Cut level C, nitrile coated.", "product", Some("pair"), "PPE", 790),
    ("Pallet of cement, 25 kg bags", "40 bags, CEM II 42.5 N.", "product", Some("pallet"), "MAT", 31_900),
    ("Consulting hour", "Senior consultant, billed per started hour.", "service", Some("h"), "SRV", 14_500),
    ("Website maintenance", "Monthly updates, backups and monitoring.", "service", Some("month"), "SRV", 39_000),
    ("Delivery within the city", "Same-day delivery up to 30 kg.", "service", None, "LOG", 2_500),
    ("Annual accounts preparation", "Year-end closing and filing.", "service", None, "ACC", 180_000),
    ("Machine servicing", "Inspection, lubrication and wear parts check.", "service", Some("visit"), "SRV", 22_000),
    ("Translation, per page", "Certified translation, standard page of 1,500 characters.", "service", Some("page"), "SRV", 4_800),
];

pub const VARIANTS: &[&str] = &["", "", "grey", "black", "small", "large", "premium", "basic", "XL", "pack of 10"];
