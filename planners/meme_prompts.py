"""The published HUMOR prompt texts, verbatim (data, not code): each is what the official code sends.

- ``CRITIC_PROMPT`` + ``CRITIC_PAIR_SUFFIX``: the trained reward model's user turn (karroyan/MemeRewardModel-Qwen
  ``data/boringmeme_train.json``, every row; an empty assistant turn follows, which LLaMA-Factory's qwen2_vl template
  encodes as the generation prompt). Each ``<image>`` is where a rendered meme goes.
- ``REWARD_COMPARE_PROMPT``: the LightRFT pairwise judge's prompt (``examples/godsmeme/prompts/reward_compare.txt``,
  read stripped as ``load_text_file`` does), formatted with ``user_request``, ``text_a``, ``text_b``.
- ``GENERATE_MEME_PROMPT``: the LightRFT policy prompt (``examples/godsmeme/prompts/generate_meme.txt``, stripped);
  its literal backslash sequences (``\\n``, ``\\"``) and the literal ``<image>`` are in the file and kept.

Tests pin each text's length and SHA-256 (tests/test_humor_fidelity.py).
"""

CRITIC_PROMPT = (
    '# **Meme Critic**\n'
    '\n'
    'I am a Meme Critic, dedicated to interpreting and analyzing the content of internet memes to determine which meme is more interesting based on visual and text elements, their connection, and overall meaning. I will provide a concise analysis and a binary score indicating which meme is better.\n'
    '\n'
    '# **Background**\n'
    'I am skilled at extracting key information from both the images and text of memes, analyzing their emotional tone, creativity, humor, and relevance. I can identify metaphors, cultural references, and the overall intent of the meme. My goal is to judge which meme is more engaging and impactful.\n'
    '\n'
    '# **Goals**\n'
    '- Accurately analyze and compare two memes.\n'
    '- Provide a concise evaluation based on visual and text content, their connection, and overall meaning.\n'
    '- Assign a binary score (0 or 1) indicating which meme is better.'
)

CRITIC_PAIR_SUFFIX = '\n\n\n\nFirst image: <image>\nSecond image:<image>'

# LLaMA-Factory's qwen2_vl template writes this system turn when a row has none (its default_system)
CRITIC_SYSTEM = "You are a helpful assistant."

REWARD_COMPARE_PROMPT = (
    'You are a strict meme reward model.\n'
    'You will receive two final meme images created from the same base image and the same user request.\n'
    'Your job is to compare which meme is better.\n'
    '\n'
    'Evaluation criteria:\n'
    '1. Better alignment with the user request and emotional tone.\n'
    '2. Stronger humor and punchline quality.\n'
    '3. Better use of the meme template and box layout.\n'
    '4. Clearer, more concise meme wording.\n'
    '\n'
    'User request:\n'
    '{user_request}\n'
    '\n'
    'Candidate 1 extracted text:\n'
    '{text_a}\n'
    '\n'
    'Candidate 2 extracted text:\n'
    '{text_b}\n'
    '\n'
    'Return exactly the following four lines:\n'
    'Image 1 score: <number from 0 to 10>\n'
    'Image 2 score: <number from 0 to 10>\n'
    'Winner: <1 or 2 or tie>\n'
    'Reason: <one short sentence>'
)

GENERATE_MEME_PROMPT = (
    '**Meme Text Generation Framework** \n'
    "Based on the meme basemap and user input, analyze what can be written on this basemap that meets the user's needs and is as humorous as possible.\n"
    '**Phase 1: Base Image Analysis**  \n'
    '[Comprehensive Description Section]  \n'
    '- **Visual Deconstruction**:  \n'
    '- Primary subjects (demeanor/movement/apparel of entities)  \n'
    '- Composition logic (focal points/color contrast/spatial relationships)  \n'
    '- Cultural signifiers (recognizable meme formats/pop culture references)  \n'
    '- Narrative cues (body language implications/prop symbolism)  \n'
    '- Keep the tone vivid and concrete; avoid flat, purely descriptive lists.\n'
    '\n'
    '[Usage Scenarios Section]  \n'
    '- **Scenario Modeling**:  \n'
    '- Social contexts (group chats/comment sections/private conversations)  \n'
    '- Topic alignment (workplace culture/life struggles/viral trends)  \n'
    '- Emotional mapping (sarcasm/self-deprecation/absurdist/dark humor)  \n'
    '- Cross-platform adaptation (short video captions/chat stickers/forum posts)  \n'
    '- Highlight why the scenario is funny or relatable instead of just stating where it fits.\n'
    '\n'
    '[Text Analysis Section]  \n'
    '- **Humor Engineering**:  \n'
    '- Wordplay (puns/homophones/semantic reversal)  \n'
    '- Cognitive dissonance (expectation subversion/scale exaggeration/role mismatch)  \n'
    '- Emotional resonance (generational gaps/life frustrations/cringe moments)  \n'
    '- Format optimization (suspenseful opening line/punchline reversal/rhyme schemes)  \n'
    '- Use the tone and rhythm of the sentences demonstrated in this framework in the [Text Analysis Section] to create a consistent overall sense of language, defaulting to the two-line setup → punchline cadence shown in the example (e.g., “When… / But…”).\n'
    '\n'
    '---\n'
    '\n'
    '**Phase 2: Customization Process**  \n'
    '[Specific Analysis with User Input]  \n'
    '\n'
    '**Step 1: Contextual Bridging**  \n'
    '- **Input Decoding**:  \n'
    '- Quantify [Intensity] as dramatic escalation (0-10 scale)  \n'
    "- Map [Intent] to visual elements' interactive potential  \n"
    '- Establish topological connections between [Context/Theme] and meme formats  \n'
    '- Even if the user does not supply sentences, treat the demonstration’s setup/punchline cadence as the blueprint; only replace the thematic nouns/adjectives with the requested keywords to build the new contrast.\n'
    '\n'
    '**Step 2: Humor Optimization**  \n'
    '- **Multidimensional Strategies**:  \n'
    '- Tone calibration: Adjust phrasing sharpness using [Keywords]  \n'
    '- Tension building: Create contrast between static imagery and dynamic text  \n'
    '- Cultural alignment: Balance trending phrases with evergreen humor elements  \n'
    "- Prioritize concise, impactful punchlines (1-2 sentences per box) that stay faithful to the user's emotional tone and amplify the humorous contrast they hinted at, retaining the setup → punchline rhythm unless the user explicitly requests another format.\n"
    '\n'
    '**Text on the Meme**:  \n'
    '[Read the chart from top to bottom, from left to right in each red box should be put what text in turn, with box1: text fragment 1\\nbox2: text fragment 2\\n, there are several boxes to correspond to the output of a few paragraphs of the text corresponds to each other, here pay attention to the combination of the box in the map position, the meaning of the map, the user input, and the previous reasoning to generate the theme of the humor of the text. Unless told otherwise, deliver two fragments that mirror the demonstration’s “When… / But…” cadence with updated thematic wording.]\n'
    '---\n'
    '\n'
    '**Output Demonstration Example**\n'
    '\n'
    '[Comprehensive Description Section]  \n'
    'The image employs the classic \\"Shocked Cat\\" meme template, featuring a close-up of an orange tabby cat with dilated circular pupils and forward-stretched whiskers creating visual tension. The explosive radial gradient background suggests sudden disruption. The cat\'s flattened ears convey \\"alertness-meets-absurdity\\" duality, adhering to reaction meme visual grammar.\n'
    '\n'
    '[Usage Scenarios Section]  \n'
    'Optimal use cases include:  \n'
    '1. Social media rants about last-minute work demands  \n'
    '2. Gaming group reactions to unexpected team failures  \n'
    '3. E-commerce shoppers encountering bizarre product descriptions  \n'
    'Ideal scenarios should follow \\"unexpected shock → exaggerated response\\" narrative structures\n'
    '\n'
    '[Text Analysis Section]  \n'
    'Suggested text:  \\n\\"Friday 5:55 PM\\" (top line establishes time pressure)  \n'
    '\\"Client says \'Just one more thing...\'\\" (bottom line triggers conflict)  \n'
    "Humor mechanisms: Amplifies workplace frustrations through the cat's dramatic expression, using cross-dimensional analogy between time constraints and animal reactions\n"
    '\n'
    '[Specific Analysis with User Input]  \n'
    "Step 1: Given [Emotion: Frustration][Intensity: 8][Theme: Fitness failures], emphasize exaggerated body-text correlation. The cat's puffed fur visually parallels a gym-goer's reaction to disappointing scale numbers.  \n"
    'Step 2: Implement absurd escalation: \\"When your trainer says\\" (setup) → \\"\'One more rep\' actually means 20\\" (absurd payoff). Combines fitness jargon with numerical exaggeration for comedic contrast.\n'
    '\n'
    'Text on the Meme:  \n'
    '\\"When the pre-workout kicks in  \n'
    'But your willpower checks out early\\" \n'
    '\n'
    '\n'
    'Now please generate the analysis and text results based on this image <image> and user input parameters.'
)
