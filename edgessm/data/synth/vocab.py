"""Word lists for the synthetic texts, written for edgessm (no dataset text is copied).

Every entry is lower case; ``_`` inside an entry stands for a space (``living_room`` is "living room").
"""

from __future__ import annotations


def words(text: str) -> tuple[str, ...]:
    """Split a whitespace-separated list; ``_`` joins the words of one multi-word entry."""
    return tuple(w.replace("_", " ") for w in text.split())


# ---- the "unknown" keyword-spotting class: common single words that are not Speech Commands keywords ----

UNKNOWN_CANDIDATES = words("""
    about above across act add after again against age ago agree air all almost alone along already also always
    among and angle animal answer any apple april area arm army around arrive art ask autumn away baby back bad
    bag bake ball band bank bar base basket bath beach bean bear beat beautiful became because become been before
    began begin behind believe bell below belt bench best better between big bike bill black blanket blue board
    boat body bone book boot both bottle bottom box boy branch bread break breakfast bridge bright bring brother
    brown brush build burn bus busy but butter button buy cake call came camera camp can candle cap captain car
    card care carry case catch caught center chair chance change charge cheap check cheese chicken child chin
    choose church circle city class clean clear climb clock close cloud coat coffee cold color come common cook
    cookie cool copy corner cost cotton could count country cover cow crowd cry cup cut dance dark daughter day
    dead deal dear decide deep desk did dinner dish doctor does dollar done door double draw dream dress drink
    drive drop dry duck during each ear early earth east easy eat edge egg either else empty end engine enough
    enter even evening ever every exact face fact fair fall family far farm fast father fear feel fence few field
    fight fill film find fine finger finish fire first fish fit flag flat floor flower fly food foot fresh friday
    friend from front fruit full fun game garden gate gave get gift girl give glad glass gold good grass gray
    great green ground group grow guess hair half hall hand hang hard hat have head hear heart heavy hello help
    her here hill him his hold hole holiday home hope horse hot hotel hour how huge human hundred hungry hurry
    husband ice idea inch inside into iron island jacket jelly job join joke juice jump just keep kettle key kick
    kind king kitchen knee knife lady lake lamp land large last late laugh lazy lead leaf lean letter level lift
    light like line lion list listen little live long look lose loud love low lucky lunch machine made mail make
    man many map market match may meal mean meat meet melon metal middle might milk mind minute mirror miss
    monday money month moon more morning most mother mountain mouse mouth move much music must name narrow near
    neck need never new news next nice night noise none north nose note nothing now number ocean often oil old
    only open orange other our outside over own page paint pair paper park party pass past path pay pen pencil
    people pepper person phone picture piece pig pink place plan plant plate play please pocket point police pond
    poor potato pour power press pretty price print problem pull purple push put queen question quick quiet race
    radio rain rather reach read ready real red rest rice rich ride ring river road rock roof room rope round
    rule run sad safe salt same sand saturday say school sea seat second see seed sell send shape share sharp
    sheep shelf shell ship shirt shoe shop short should shout show shut sick side sign silver simple sing sister
    sit size skin sky sleep slow small smile smoke snake snow soap soft some son song soon sound soup south
    space speak spring square stair star start station stay steam step stick still stone store storm story
    street strong such sugar summer sun sunday supper sure sweet swim table tail take talk tall taste teach team
    teeth tell ten test than thank that their them then there these thick thin thing think this those though
    thousand through thursday ticket tiger time tired today together told tomorrow tonight took tooth top touch
    towel town toy train travel true try tuesday turn twelve twenty uncle under until use valley very village
    visit voice wait walk wall want warm wash watch water wave way wear weather wednesday week well went were
    west wet what wheel when where which while white who why wide wife wild will wind window wing winter wish
    with without woman wood wool word work world would year yellow young
""")

# Speech Commands keywords' homophones and near-identical forms: never used as "unknown" words.
KEYWORD_HOMOPHONES = words("""
    for fore to too tu won ate ait know noh nein write rite wright sicks sics backwards forwards foreword
    how's wows yess bedd burd kat dawg downe stopp zeroes
""")


# ---- sentence vocabulary ----

NAMES = words("""
    emma olivia ava sophia mia amelia harper evelyn abigail emily ella elizabeth camila luna avery mila aria
    scarlett penelope layla chloe victoria madison eleanor grace nora riley zoe hannah hazel lily ellie violet
    stella aurora natalie leah audrey bella claire naomi elena caroline anna maya ruby ivy alice hailey sarah
    julia lucy rose laura rachel helen diana fiona karen nina priya aisha mei yuki fatima ingrid
    liam noah oliver elijah james william lucas henry theodore jack levi alexander daniel michael mason ethan
    logan owen samuel jacob aiden john joseph wyatt david leo luke julian hudson matthew ezra gabriel carter
    isaac anthony dylan thomas elias charles caleb christopher andrew joshua nathan adrian aaron ryan cooper
    robert ian everett wesley hunter jordan oscar simon victor peter edward patrick kevin brian george omar
    raj hiroshi carlos ahmed lars pedro tom ben sam max
""")

RELATIVES = words("""
    mom dad mother father sister brother grandma grandpa aunt uncle cousin son daughter wife husband friend
    neighbor boss teacher doctor dentist nurse coach roommate partner colleague landlord plumber babysitter
    best_friend little_brother little_sister
""")

ROOMS = words("""
    kitchen living_room bedroom bathroom hallway garage office dining_room basement attic nursery guest_room
    laundry_room study playroom den pantry porch kids_room master_bedroom
""")

DEVICES = words("""
    lights lamp fan heater air_conditioner television radio speaker coffee_machine kettle oven dishwasher
    washing_machine dryer computer printer projector fireplace ceiling_fan night_light humidifier microwave
    stereo desk_lamp floor_lamp reading_light christmas_lights air_purifier water_heater electric_blanket
    space_heater sprinklers porch_light router monitor game_console
""")

OPENABLES = words("front_door back_door garage_door side_gate blinds curtains windows shutters skylight")
LOCKABLES = words("front_door back_door garage_door side_gate windows car shed")
READABLES = words("the_news the_headlines my_messages my_emails the_weather_report a_story a_poem my_schedule")

FOODS = words("""
    apples bananas bread butter carrots cheese chicken coffee cookies eggs fish flour grapes honey juice lemons
    lettuce milk noodles oatmeal onions oranges pasta peaches pears peppers pizza potatoes rice salad salmon
    salt sandwiches soup spinach strawberries sugar tea tomatoes tuna yogurt cereal crackers beans garlic ginger
    mushrooms olives pancakes waffles sausages bacon cabbage celery cucumbers corn peas plums cherries
    watermelon pineapple mangoes avocados broccoli cauliflower pumpkin ham turkey beef lamb shrimp dumplings
    tacos curry chocolate ice_cream cake pie muffins bagels popcorn peanuts almonds walnuts raisins cinnamon
    vinegar ketchup mustard jam lemonade sparkling_water orange_juice hot_chocolate cream tofu lentils granola
    toast biscuits pretzels salsa hummus pickles radishes beets zucchini asparagus kale blueberries raspberries
    coconut figs apricots limes
""")

ANIMALS = words("""
    horse cow pig sheep goat duck goose rabbit mouse hamster parrot owl eagle hawk fox wolf bear deer moose lion
    tiger elephant giraffe zebra monkey gorilla kangaroo koala panda penguin dolphin whale shark turtle frog
    snake lizard spider bee butterfly squirrel raccoon otter beaver camel donkey puppy kitten goldfish pony swan
    crow pigeon robin seal crab octopus snail hedgehog badger
""")
# irregular plurals of the animals above (the rest add s)
ANIMAL_PLURALS = {"mouse": "mice", "sheep": "sheep", "goose": "geese", "deer": "deer", "moose": "moose",
                  "wolf": "wolves", "fox": "foxes", "goldfish": "goldfish", "octopus": "octopuses", "pony": "ponies",
                  "puppy": "puppies"}  # fmt: skip

OBJECTS = words("""
    key wallet phone umbrella jacket coat scarf hat glove backpack bag suitcase book notebook pen pencil laptop
    charger remote blanket pillow towel toothbrush mirror chair table desk sofa shelf drawer bottle cup mug
    plate bowl spoon fork knife pan pot basket box ladder hammer screwdriver scissors candle clock watch
    calendar map ticket letter package envelope newspaper magazine camera bicycle ball kite guitar piano violin
    drum painting photo plant vase rug lamp battery tent flashlight helmet jar tray bucket broom mop sweater
    necklace ring bracelet brush comb sponge toaster radio
""")

FURNITURE = words("table desk shelf counter sofa bed chair windowsill dresser cabinet bench floor fridge piano")

PLACES = words("""
    park station airport library gym office school hospital bank post_office pharmacy supermarket bakery beach
    museum cinema mall stadium zoo market harbor bus_stop gas_station hotel restaurant cafe hardware_store
    bookstore playground theater farm lake river city_center university swimming_pool train_station
    police_station fire_station town_hall car_wash vet barber garden_center bowling_alley
""")

SHOPS = words("""
    pharmacy supermarket bakery gas_station cafe restaurant hardware_store bookstore bank post_office hospital
    parking_lot coffee_shop pizza_place grocery_store flower_shop charging_station pet_store
""")

CITIES = words("""
    london paris tokyo berlin madrid rome chicago boston denver seattle dallas houston atlanta miami toronto
    vancouver sydney melbourne dublin edinburgh glasgow manchester liverpool amsterdam vienna prague lisbon
    athens cairo nairobi mumbai delhi beijing shanghai seoul bangkok singapore manila lima bogota oslo stockholm
    helsinki copenhagen brussels zurich geneva munich hamburg milan naples venice florence barcelona seville
    portland nashville detroit cleveland pittsburgh philadelphia baltimore orlando tampa new_york los_angeles
    san_francisco new_orleans mexico_city cape_town buenos_aires
""")

ADJECTIVES = words("""
    big small little large tiny huge long short tall old new young fresh clean dirty hot cold warm cool soft
    hard quiet loud bright dark heavy fast slow early late easy difficult simple busy sad tired hungry thirsty
    sleepy angry calm brave kind nice friendly funny serious strange lucky beautiful pretty shiny sticky wet dry
    empty full broken expensive cheap favorite special important strong weak sweet sour bitter salty spicy
    delicious healthy fine great wonderful terrible perfect ready careful gentle polite noisy lazy clever curious
    famous rare round square flat smooth rough sharp narrow wide deep thick thin
""")

COLORS = words("red blue green yellow orange purple pink brown black white gray silver gold beige navy turquoise")

WEATHER_ADJ = words("sunny rainy windy cloudy foggy snowy stormy freezing humid chilly")
WEATHER_VERBS = words("rain snow hail freeze")

# (base, past) of verbs grouped by what they take as object
FOOD_VERBS = (("eat", "ate"), ("cook", "cooked"), ("buy", "bought"), ("order", "ordered"), ("bake", "baked"),
              ("taste", "tasted"), ("share", "shared"), ("want", "wanted"), ("need", "needed"), ("like", "liked"),
              ("make", "made"), ("wash", "washed"), ("finish", "finished"), ("cut", "cut"), ("warm up", "warmed up"),
              ("pack", "packed"))  # fmt: skip
OBJECT_VERBS = (("find", "found"), ("lose", "lost"), ("clean", "cleaned"), ("fix", "fixed"), ("move", "moved"),
                ("paint", "painted"), ("carry", "carried"), ("drop", "dropped"), ("borrow", "borrowed"),
                ("bring", "brought"), ("sell", "sold"), ("buy", "bought"), ("hide", "hid"), ("wrap", "wrapped"),
                ("pack", "packed"), ("break", "broke"), ("check", "checked"), ("take", "took"), ("keep", "kept"),
                ("forget", "forgot"), ("return", "returned"), ("polish", "polished"), ("repair", "repaired"),
                ("lend", "lent"), ("pick up", "picked up"), ("put away", "put away"))  # fmt: skip
PERSON_VERBS = (("call", "called"), ("visit", "visited"), ("meet", "met"), ("help", "helped"), ("thank", "thanked"),
                ("invite", "invited"), ("text", "texted"), ("email", "emailed"), ("remind", "reminded"),
                ("ask", "asked"), ("tell", "told"), ("pick up", "picked up"), ("wait for", "waited for"),
                ("drive", "drove"), ("surprise", "surprised"), ("hug", "hugged"))  # fmt: skip
ANIMAL_VERBS = (("feed", "fed"), ("see", "saw"), ("watch", "watched"), ("hear", "heard"), ("draw", "drew"),
                ("photograph", "photographed"), ("pet", "petted"), ("chase", "chased"), ("follow", "followed"),
                ("find", "found"), ("count", "counted"))  # fmt: skip
MOTION_VERBS = (("go", "went"), ("walk", "walked"), ("drive", "drove"), ("run", "ran"), ("ride", "rode"),
                ("travel", "traveled"), ("fly", "flew"), ("hurry", "hurried"), ("return", "returned"),
                ("cycle", "cycled"), ("move", "moved"), ("head", "headed"))  # fmt: skip

ACTIVITIES = words("""
    reading cooking running swimming dancing singing painting sleeping working studying walking shopping
    cleaning gardening fishing driving playing writing baking cycling hiking skiing jogging knitting camping
    sailing skating drawing relaxing waiting
""")

SPORTS = words("""
    football soccer tennis basketball baseball golf hockey cricket rugby volleyball badminton chess cards
    table_tennis bowling
""")

GENRES = words("""
    jazz rock pop classical blues country reggae hip_hop folk soul funk disco metal punk techno ambient
    piano_music lullabies dance_music relaxing_music
""")
MEDIA = words("""
    the_news a_podcast an_audiobook the_radio some_music my_playlist the_weather_report the_radio_station
    my_favorite_songs some_white_noise rain_sounds the_latest_episode
""")
APPS = words("the_camera the_calculator settings the_calendar maps my_email messages the_browser the_gallery notes")

EVENTS = words("""
    meeting appointment dentist_appointment lunch dinner party class lesson interview call flight
    haircut workout practice concert game doctor's_appointment
""")

TODOS = words("""
    call_my_mother buy_milk water_the_plants take_out_the_trash feed_the_fish pay_the_rent check_the_oven
    pick_up_the_kids walk_the_dog book_a_table charge_my_phone take_my_medicine send_the_email lock_the_door
    bring_an_umbrella return_the_library_books buy_a_birthday_present clean_the_kitchen call_the_plumber
    stretch_my_legs drink_some_water pack_my_bag renew_my_passport wish_grandma_happy_birthday
""")

MESSAGES = words("""
    i'm_on_my_way i'll_be_late running_ten_minutes_late see_you_soon call_me_back i'm_home
    dinner_is_ready where_are_you happy_birthday thank_you good_night i_love_you i'm_outside
    can_you_pick_me_up don't_forget_the_keys the_meeting_is_canceled let's_meet_at_noon
""")

DAYS = words("monday tuesday wednesday thursday friday saturday sunday")
MONTHS = words("january february march april may june july august september october november december")
WHEN = words("""
    today tomorrow tonight this_morning this_afternoon this_evening tomorrow_morning tomorrow_night
    this_weekend next_week on_monday on_tuesday on_wednesday on_thursday on_friday on_saturday on_sunday
    later_today in_the_morning after_lunch before_dinner next_month
""")
PAST_WHEN = words("""
    yesterday last_night this_morning last_week on_monday on_tuesday on_wednesday on_thursday on_friday
    on_saturday on_sunday last_weekend two_days_ago earlier_today last_summer last_year
""")

ADVERBS = words("""
    quickly slowly quietly loudly carefully gently really always never often sometimes usually again soon later
    now already still almost just maybe probably finally suddenly
""")

DIRECTIONS = words("left right forward backward up down")
CONTAINERS = words("bags boxes bottles cans jars packs cartons loaves bunches")
UNITS = words("minutes hours seconds days weeks")
DISTANCE_UNITS = words("meters miles kilometers blocks steps")
CURRENCIES = words("dollars euros pounds")
# words that only the number, clock, money and sentence-opening slots use
EXTRA_WORDS = words("""
    half past quarter o'clock hour hours hundred thousand million oh cent cents pence percent degrees dollar
    euro pound minute zero they hey okay please can could you an and a of in the morning evening
""")

# playing cards (the "games" sentences)
CARD_RANKS = ("ace", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "jack", "queen", "king")
CARD_SUITS = ("clubs", "diamonds", "hearts", "spades")
