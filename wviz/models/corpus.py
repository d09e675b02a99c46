"""A small bundled corpus for the Sec. 8 / Figure 4 experiment of 002 (the relative deviation of lambda* from
alpha z, per layer): forty short English sentences of varied length, topic and syntax, written for wviz; and a
paragraph for a decoder's perplexity (PARAGRAPH)."""

CORPUS: tuple[str, ...] = (
    "The cat sat on the mat and watched the rain.",
    "Attention lets every word look at every other word in the sentence.",
    "She opened the window because the room was too warm.",
    "A small boat drifted slowly across the quiet lake.",
    "Prices rose sharply after the storm damaged the harbour.",
    "The committee postponed its decision until next spring.",
    "He forgot his umbrella, so he got wet on the way home.",
    "Optimal transport moves mass from one distribution to another at the least cost.",
    "The children built a sandcastle that the tide washed away.",
    "Where did you put the keys to the garden shed?",
    "Our train was delayed by forty minutes this morning.",
    "The violinist played the final movement without the score.",
    "Bees visit thousands of flowers to make a single spoonful of honey.",
    "Please send me the report before Friday afternoon.",
    "The old library smelled of dust, leather and paper.",
    "A transformer stacks layers of self-attention and feed-forward networks.",
    "Mountains in the north stay covered with snow until June.",
    "The doctor asked him to rest for a week.",
    "If it rains tomorrow, the match will be moved indoors.",
    "My grandmother grows tomatoes, beans and courgettes in her garden.",
    "The new bridge connects the two halves of the city.",
    "Nobody expected the quiet student to win the debate.",
    "The bakery on the corner sells fresh bread every morning.",
    "Softmax turns a list of scores into a probability distribution.",
    "The museum reopened after two years of restoration work.",
    "They walked along the beach until the sun went down.",
    "A sudden gust of wind blew the papers off the desk.",
    "The recipe calls for two eggs, flour, sugar and a pinch of salt.",
    "Scientists observed a distant galaxy through the new telescope.",
    "The football team celebrated its first victory of the season.",
    "Can you explain why the sky looks blue during the day?",
    "The river flooded the fields after a week of heavy rain.",
    "He repaired the bicycle with a borrowed set of tools.",
    "The teacher wrote the equation on the board and waited.",
    "Several birds gathered on the wire above the street.",
    "The company announced a new phone with a larger screen.",
    "We watched an old film and ate popcorn on the sofa.",
    "The map showed a path through the forest to the village.",
    "Fresh snow muffled every sound in the valley.",
    "The engineer checked each bolt twice before the test.",
)

# A paragraph for a decoder's perplexity under each normaliser (wviz.models.tasks.perplexity): plain, varied English
# prose of about 120 words, written for wviz.
PARAGRAPH = (
    "The old lighthouse stood at the end of a narrow path, where the cliffs met the sea. Every evening the keeper "
    "climbed the spiral stairs, trimmed the wick and lit the lamp, so that the fishing boats could find their way "
    "home. In winter the storms were fierce, and waves broke over the rocks below with a sound like distant thunder. "
    "The keeper kept a careful log of the weather, the ships that passed and the birds that rested on the railing. "
    "When the light was finally replaced by an automatic beacon, the village held a small party in his honour. He "
    "moved to a cottage nearby, but on clear nights he still walked to the cliff to watch the beam sweep across the "
    "water."
)
