"""Word lists the built-in training prompts of feature drafts are made from (chat_prompts.py).

Chat-like requests of the kinds users send an instruction-tuned model: questions on many topics,
how-tos, explain / summarise / rewrite / extract over short texts, small code tasks, lists and
short creative writing. Topics and tasks that the held-out evaluation prompts of the acceptance benchmark (and the
SmolLM2 demo's chat prompts) ask about are left out on purpose (chat_prompts.HELD_OUT_TOPICS
guards it), so acceptance measured on those prompts is not measured on training data.
"""

from __future__ import annotations

TOPICS = tuple("""
the French Revolution|binary search|vaccines|the water cycle|black holes|inflation|the history of the internet|
machine learning|volcanoes|William Shakespeare|the immune system|quantum computing|the Roman Empire|recursion|
plate tectonics|the stock market|electric cars|solar panels|the human heart|DNA|the Great Wall of China|
ancient Egypt|the printing press|the Industrial Revolution|World War I|the Renaissance|democracy|
supply and demand|compound interest|credit scores|budgeting|meditation|yoga|marathon training|vegetarian diets|
coffee|chocolate making|bread baking|composting|urban gardening|houseplants|bird migration|dolphins|elephants|
penguins|sharks|rainforests|deserts|coral reefs|earthquakes|hurricanes|tornadoes|glaciers|the Moon landing|
Mars exploration|the International Space Station|telescopes|gravity|magnetism|electricity|batteries|
nuclear energy|wind turbines|recycling|plastic pollution|ocean currents|the Amazon river|the Sahara|Japan|Brazil|
Canada|India|Australia|Norway|Kenya|Mexico|jazz music|classical music|the guitar|learning the piano|photography|
oil painting|origami|chess|soccer|basketball|tennis|the Olympic Games|cycling|swimming|public speaking|
time management|job interviews|writing a resume|remote work|team leadership|negotiation|customer service|
starting a small business|marketing|social media|online privacy|passwords|cybersecurity|cloud computing|
databases|operating systems|computer networks|the HTTP protocol|encryption|blockchain|open source software|
version control with git|unit testing|Python decorators|Python generators|object-oriented programming|
functional programming|sorting algorithms|hash tables|linked lists|graph algorithms|dynamic programming|
regular expressions|JSON|REST APIs|Docker containers|the Linux command line|spreadsheets|statistics|probability|
prime numbers|the Pythagorean theorem|fractions|algebra|calculus|geometry|the metric system|time zones|calendars|
the periodic table|chemical reactions|acids and bases|evolution|genetics|bacteria and viruses|antibiotics|
nutrition|vitamins|exercise|stress|friendship|parenting|learning a new language|reading habits|libraries|museums|
architecture|bridges|skyscrapers|trains|airplanes|ships|the invention of the telephone|radio|television|
video games|movies|podcasts|poetry|novels|mythology|Greek gods|the Vikings|the Aztecs|medieval castles|knights|
pirates|dinosaurs|fossils|the ice age|comets|stars|galaxies|the Big Bang|clouds|thunderstorms|snow|tides|
lighthouses|maps|compasses|GPS|robots|artificial intelligence|self-driving cars|drones|3D printing|smartphones|
allergies|first aid|dental hygiene|camping|fishing|volunteering|saving energy at home|moving to a new city|
learning to drive|car maintenance|dog training|aquariums|horses|mushrooms|trees|flowers|cooking pasta|
making soup|grilling|spices|fermentation|cheese|chess openings|card games|board games|puzzles|magic tricks|
the history of money|taxes|insurance|retirement savings|international trade|globalization|human rights|
the United Nations|elections|the justice system|philosophy|ethics|Socrates|logic|critical thinking|
memory techniques|creativity|habits|motivation|procrastination|happiness|the Silk Road|the Ottoman Empire|
Ancient Greece|the Cold War|the Space Race|the Wright brothers|Marie Curie|Albert Einstein|Isaac Newton|
Charles Darwin|Leonardo da Vinci|Ada Lovelace|Alan Turing|Nikola Tesla|the steam engine|the light bulb|
vaccination history|penicillin|the microscope|submarines|satellites|the ozone layer|climate change|
renewable energy|hydroelectric power|geothermal energy|electric grids|water treatment|sewage systems|
public transport|city planning|traffic jams|roundabouts|airports|cargo ships|supply chains|warehouses|
online shopping|credit cards|cryptocurrency|banks|interest rates|loans|student debt|freelancing|
productivity apps|email etiquette|video calls|note taking|speed reading|studying for exams|homework|
online courses|scholarships|university applications|internships|career changes|salary negotiation|
workplace conflict|giving feedback|mentoring|networking events|small talk|active listening|body language|
emotional intelligence|mindfulness|journaling|gratitude|minimalism|decluttering|interior design|
painting a room|woodworking|knitting|sewing|pottery|calligraphy|drawing|sculpture|street art|photography lighting|
film editing|animation|comic books|fantasy novels|science fiction|detective stories|fairy tales|folk music|
opera|hip hop|the violin|drums|choirs|dance|ballet|theater|stand-up comedy|circus|zoos|national parks|hiking boots|
mountain climbing|scuba diving|surfing|skiing|ice skating|running shoes|strength training|stretching|
sleep cycles|dreams|the brain|the nervous system|the digestive system|the lungs|the kidneys|the skin|eyesight|
hearing|taste buds|blood types|fever|the common cold|handwashing|hospitals|nurses|pharmacists|veterinarians|
farming|irrigation|tractors|organic food|food waste|supermarkets|restaurants|street food|sushi|pizza|tacos|
curry|noodles|rice|bread|olive oil|honey production|sugar|salt|vinegar|baking soda|spiders|ants|butterflies|
frogs|owls|eagles|wolves|bears|whales|octopuses|jellyfish|camels|kangaroos|pandas|tigers|snakes|turtles|
parrots|rabbits|hamsters|goldfish|the moon phases|eclipses|meteor showers|the speed of light|sound waves|
lasers|microwaves|refrigerators|air conditioning|thermometers|clocks|calculators|the abacus|typewriters|
printers|keyboards|touchscreens|computer memory|processors|the cloud|Wi-Fi|Bluetooth|QR codes|barcodes|
spam email|phishing|backups|antivirus software|web browsers|search engines|Wikipedia|programming languages|
compilers|web development|HTML and CSS|JavaScript frameworks|mobile apps|APIs|software bugs|code reviews|
agile development|technical debt|open data|data visualization|surveys|the census|population growth|
migration|languages of the world|sign language|writing systems|the alphabet|dictionaries|translation|
etiquette around the world|holidays|New Year traditions|weddings|birthdays|gift giving|tipping|
volunteering abroad|backpacking|travel insurance|packing light|jet lag|passports|hotels|camping gear
""".replace("\n", "").split("|"))

# Question and request templates over a topic {t} (and a second topic {u}).
TOPIC_TEMPLATES = (
    "Explain {t} in simple terms.", "What is {t}?", "Tell me about {t}.", "Give me three interesting facts about {t}.",
    "How does {t} work?", "Why is {t} important?", "Write a short paragraph about {t}.",
    "What are the pros and cons of {t}?", "Can you give me a beginner's guide to {t}?",
    "List five key points about {t}.", "What are common misconceptions about {t}?", "Explain {t} to a child.",
    "Give me a quick summary of {t}.", "What is the history of {t}?", "How can I learn more about {t}?",
    "What are some tips related to {t}?", "Describe {t} in three sentences.", "Compare {t} and {u}.",
    "What is the connection between {t} and {u}?", "Give an analogy that explains {t}.",
    "What are the main challenges of {t}?", "Define {t} and give an example.", "Outline a short lesson about {t}.",
    "I'm curious about {t}. Where should I start?", "Summarize the key ideas behind {t} in bullet points.",
    "What are two surprising things about {t}?", "Why do people find {t} interesting?",
    "What should everyone know about {t}?", "Can you explain {t} briefly?", "What is the main idea of {t}?",
    "How has {t} changed over time?", "What are the most important facts about {t}? Keep it short.",
    "Explain the basics of {t} in one paragraph.", "Is {t} difficult to understand? Explain why or why not.",
    "What would you tell a friend who asks about {t}?", "What are three questions people often ask about {t}?",
    "How is {t} different from {u}?", "Give me a simple example of {t}.", "What are the benefits of {t}?",
    "Briefly, what is {t} and why does it matter?",
)

# Everyday how-tos and advice ({a}: an activity).
ACTIVITIES = tuple("""
make a cup of tea|save money on groceries|start a vegetable garden|learn to swim|prepare for a job interview|
write a thank-you note|organize my closet|keep my houseplants alive|plan a birthday party|study for a math test|
improve my handwriting|stay focused while working from home|make friends in a new city|train for a 5k run|
cook rice on the stove|clean a laptop keyboard|choose a good book|learn a new language quickly|
change a flat tire|reduce my screen time|write a cover letter|prepare a healthy lunch|save energy at home|
get better at public speaking|take good photos with my phone|remember people's names|wake up earlier|
set up a budget|plan a road trip|learn to cook|paint a room|care for a new puppy|start running|
write a short story|keep a journal|back up my computer|create a strong password|read more books|
learn to play chess|make pancakes|brew coffee at home|teach a child to ride a bike|prepare for an exam|
start a podcast|organize a team meeting|give a good presentation|write a clear email|learn to draw|
reduce stress before an exam|choose a laptop|grow tomatoes|make homemade pizza|fold a paper airplane|
pack a suitcase efficiently|stay hydrated|stretch after a workout|apologize to a friend|ask for a raise|
start learning to code|keep a conversation going|improve my vocabulary|write a good essay introduction
""".replace("\n", "").split("|"))

HOWTO_TEMPLATES = (
    "How do I {a}?", "What is the best way to {a}?", "Give me tips to {a}.", "Can you help me {a}?",
    "What are the steps to {a}?", "I want to {a}. Where do I begin?", "List three ways to {a}.",
    "What mistakes should I avoid when I try to {a}?", "Give me a simple plan to {a}.",
    "Explain how to {a} in a few steps.",
)

LANGUAGES = ("Python", "Python", "Python", "Python", "JavaScript", "JavaScript", "Java", "C", "C++", "Go", "Rust",
             "TypeScript", "Bash", "Ruby")

CODE_TASKS = tuple("""
computes the factorial of a number|returns the n-th Fibonacci number|checks whether a number is prime|
merges two sorted lists|removes duplicates from a list while keeping the order|flattens a nested list|
finds the second largest element in a list|converts a Roman numeral to an integer|
checks if two strings are anagrams|returns the greatest common divisor of two numbers|
reads a CSV file and prints each row|capitalizes the first letter of every word|
computes the average of a list of numbers|finds the longest word in a sentence|generates a random password|
checks whether parentheses are balanced|transposes a matrix|implements binary search|
sorts a list of dictionaries by a key|computes the sum of the digits of an integer|
validates an email address|converts a list of pairs to a dictionary|rotates a list by k positions|
checks if a year is a leap year|returns the median of a list|splits a list into chunks of size n|
converts kilometers to miles|counts the lines in a file|implements a simple stack|
implements a queue with two stacks|finds all odd numbers in a list|computes the power set of a set|
returns the intersection of two lists|parses a date string|finds the most common element in a list|
computes compound interest|checks if a list is sorted|generates the first n prime numbers|
counts the uppercase letters in a string|removes all whitespace from a string|
returns the minimum and maximum of a list|converts a string to title case|checks if a number is a perfect square|
finds the index of an item in a list|multiplies two matrices|computes the area of a circle|
converts a decimal number to binary|calculates the length of a string without using len|
returns every second element of a list|shuffles a list|counts the characters in a file|
checks whether a string contains only digits|joins a list of strings with commas|
returns the squares of the numbers from 1 to n|finds duplicate values in a list|
calculates a tip for a restaurant bill|converts hours and minutes to seconds|
prints a multiplication table|simulates rolling two dice|checks whether a point lies inside a rectangle
""".replace("\n", "").split("|"))

CODE_TEMPLATES = (
    "Write a {lang} function that {task}.", "How do I write a {lang} program that {task}?",
    "Show me {lang} code that {task}, with a short explanation.", "Can you write {lang} code that {task}?",
    "Write a short {lang} script that {task}.", "Give me a {lang} example that {task}.",
)

CODE_QUESTIONS = (
    "How is {x} different from {y} in programming?", "What does {x} mean in programming? Keep it short.",
    "When should I use {x} instead of {y}?", "Give an example of {x} in JavaScript.",
    "What are common mistakes with {x}?", "Why would a programmer use {x}?",
)
CODE_CONCEPTS = ("a variable", "a function", "a class", "a dictionary", "a set", "a string", "an integer", "a float",
                 "a while loop", "a lambda", "a module", "an exception", "a generator", "a decorator",
                 "a recursive function", "an array", "a hash map", "a queue", "a stack", "a pointer", "an interface",
                 "an API", "a database index", "a unit test", "a global variable", "a constant", "a boolean",
                 "a callback", "a promise", "a thread", "a process", "a file handle")

# Creative and everyday writing ({t}: a topic; {o}: an occasion or audience).
CREATIVE_TEMPLATES = (
    "Write a poem about {t}.", "Write a short story that involves {t}.", "Write a limerick about {t}.",
    "Write a motivational quote about {t}.", "Write a tweet about {t}.", "Write a slogan for a campaign about {t}.",
    "Suggest three names for a shop that sells {p}.", "Write a short message to {o}.",
    "Write a short thank-you note to {o}.", "Write an invitation to {e}.", "Write a product description for {p}.",
    "Write the opening line of a novel about {t}.", "Give me five ideas for {e}.",
    "Write a four-line rhyme for {o}.", "Describe {s} in three sentences.", "Write a short dialogue about {t}.",
)
PRODUCTS = ("handmade candles", "used books", "running shoes", "houseplants", "board games", "bicycles", "tea",
            "vintage clothes", "toys", "fresh flowers", "coffee beans", "kitchen knives", "umbrellas", "stationery",
            "phone cases", "pet food", "jewellery", "honey", "soap", "hats")
OCCASIONS = ("a colleague who is leaving the company", "my neighbour who helped me", "a friend who passed an exam",
             "my teacher at the end of the year", "my team after a successful project", "a friend who is moving away",
             "a new coworker", "my landlord about a broken heater", "a customer who left a kind review",
             "my cousin on their wedding day", "a friend who is feeling sick", "my coach after the season")
EVENTS = ("a summer picnic", "a book club meeting", "a team lunch", "a charity run", "a school science fair",
          "a garden party", "a board game night", "a farewell dinner", "a neighbourhood cleanup", "a movie night")
SCENES = ("a rainy afternoon in a big city", "a quiet library at closing time", "a busy train station",
          "a snowy mountain cabin", "a beach at sunrise", "a market on a Saturday morning", "an empty classroom",
          "a forest after a storm", "a kitchen before a holiday dinner", "a harbour at dusk")

# Short texts for the text tasks: names, places, numbers and dates are filled in (chat_prompts.sentences).
FIRST_NAMES = ("Liam", "Sofia", "Ahmed", "Mei", "Olga", "Kwame", "Lucia", "Tom", "Priya", "Jonas", "Elena", "Omar",
               "Hana", "Diego", "Nina", "Samuel", "Aisha", "Peter", "Yuki", "Grace", "Mateo", "Leila", "Ivan", "Rosa")
LAST_NAMES = ("Garcia", "Nguyen", "Smith", "Kowalski", "Okafor", "Rossi", "Müller", "Silva", "Kim", "Haddad",
              "Johansson", "Dubois", "Novak", "Tanaka", "Brown", "Costa")
CITIES = ("Oslo", "Nairobi", "Lima", "Prague", "Seoul", "Toronto", "Dublin", "Cairo", "Vienna", "Manila", "Porto",
          "Krakow", "Denver", "Hanoi", "Marseille", "Glasgow", "Osaka", "Bogota", "Athens", "Helsinki")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
ITEMS = ("a notebook", "a sandwich", "a train ticket", "a pair of gloves", "a desk lamp", "a bus pass", "a coffee",
         "a backpack", "a phone charger", "a bottle of water", "a concert ticket", "a bicycle helmet")
SENTENCE_TEMPLATES = (
    "{n1} and {n2} will travel from {c1} to {c2} on {m} {d} to visit a museum.",
    "The meeting with {n1} {l1} was moved to {m} {d}, and {n2} will send the new agenda.",
    "{n1} bought {i1} for ${p1} and {i2} for ${p2} at the station in {c1}.",
    "Our team in {c1} grew from {k1} to {k2} people this year, while the office in {c2} stayed the same.",
    "On {m} {d}, {n1} {l1} opened a small cafe in {c1} that sells {i1} for ${p1}.",
    "{n1} called {n2} to say that the train to {c1} leaves at {h}:{mm} from platform {k1}.",
    "The library in {c1} will close on {m} {d} for repairs and reopen {k1} weeks later.",
    "{n1} paid ${p1} for the tickets, {n2} paid ${p2} for dinner, and they split the taxi.",
    "After the workshop in {c1}, {n1} wrote a report for {n2} {l2} about the {k1} new projects.",
    "The school trip to {c2} costs ${p1} per student and leaves on {m} {d} at {h}:{mm}.",
    "{n1} has lived in {c1}, {c2} and {c3}, and now teaches music to {k1} students.",
    "The package from {c1} arrived on {m} {d}, but {i1} inside was broken, so {n1} asked for a refund of ${p1}.",
)
SLOPPY = (
    "hey can u tell me when the {e2} starts", "i dont know if we has enough chairs for everyone",
    "the report were finished yesterday but nobody read it", "we should of left earlier to catch the bus",
    "him and me is going to the market tomorow", "there going to announce the results next week",
    "i seen that movie last year and it were great", "pls send me the file asap thx",
    "the team dont have time for another meeting this week", "she go to the gym every day before work",
    "your invited to our party on saturday dont be late", "can u check if the printer is working again",
)
REWRITE_TEMPLATES = (
    "Rewrite this sentence to be more formal: {s}", "Rewrite this sentence in plain English: {s}",
    "Paraphrase this sentence: {s}", "Make this sentence shorter: {s}", "Fix the grammar in this sentence: {s}",
    "Rewrite this sentence in the past tense: {s}", "Rewrite this sentence so it sounds more polite: {s}",
    "Explain what this sentence means: {s}", "Translate this sentence into French: {s}",
    "Translate this sentence into German: {s}", "Make this sentence sound more exciting: {s}",
    "Rewrite this in the first person: {s}",
)
EXTRACT_TEMPLATES = (
    "Extract the names of the people in this text: {s}", "List the cities mentioned in this text: {s}",
    "What dates are mentioned in this text? {s}", "Extract all the numbers from this text: {s}",
    "List the prices in this text: {s}", "Who is mentioned in this text, and where? {s}",
    "Extract the key facts from this text as a list: {s}", "What are the keywords in this text? {s}",
    "Turn this text into a short list of facts: {s}", "Find every place name in this text: {s}",
)
PASSAGE_TEMPLATES = (
    "Summarize the following text:\n\n{p}", "Summarize this in two sentences:\n\n{p}",
    "Give a one-sentence summary of the text below.\n\n{p}", "What are the main points of this text?\n\n{p}",
    "Rewrite the following text in simpler language:\n\n{p}", "Extract the key terms from this text as a list:\n\n{p}",
    "Write three questions a student might ask about this text:\n\n{p}", "{p}\n\nWhat is this text about?",
    "Turn this text into a bulleted list:\n\n{p}", "Give this text a short title:\n\n{p}",
    "Summarize in two bullet points:\n\n{p}", "Make this text shorter without losing the main idea:\n\n{p}",
    "Rewrite this text for a ten-year-old:\n\n{p}", "{p}\n\nSummarize the text above in one sentence.",
)
CODE_PASSAGE_TEMPLATES = (
    "Explain what this code does:\n\n{p}", "Add comments to this code:\n\n{p}", "Is there a bug in this code?\n\n{p}",
    "Suggest improvements for this code:\n\n{p}", "What does this code print or return?\n\n{p}",
    "Rewrite this code to be easier to read:\n\n{p}",
)
