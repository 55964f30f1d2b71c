"""looks_unfinished, the default continuation detector: it fires on replies that
announce a next step or stop mid-way, and not on ordinary final answers."""

from __future__ import annotations

import pytest

from agentrio import looks_unfinished

UNFINISHED = [
    "",
    "  \n ",
    "Let me check the logs.",
    "Let me also check the logs.",
    "Let me just run the tests once more.",
    "I'll now run the test suite.",
    "Next, I will update the README.",
    "Now I'll look at the second file.",
    "Found 3 matching files. Let me read each of them.",
    "Here are the steps:",
    "Step 2:",
    "Working on it...",
    "Searching\u2026",
    "I'm going to search the docs first.",
    "First, I'll list the directory.",
    "Here is the code:\n```python\ndef f():\n    return 1",
    "OK, let me fix that.",
    "To do this, I'll read the config file.",
    "Checked a.txt, b.txt,",
    "The config is missing a key. I need to check the defaults.",
    "I still need to run the linter.",
    "**Next, I will update the README.**",
    "Let's start with the parser.",
    "I\u2019ll continue with the next file.",
    "I will proceed with the migration.",
    "Good progress so far.\n\nNow let me verify the output.",
    "I am going to retry the download.",
    "Let me summarize the findings.",
    "I'm going to read the file.",
    "Let me think...",
    "I read a.py, b.py and...",
    "Now let's check the config.",
    "To do this, let's read the config file.",
    "OK, I'll first check the logs.",
    "I need to look at the tests too.",
    "Now I need to verify the output.",
    "I also need to update the changelog.",
    "I need to first read the config.",
    "Let me point the client at the new server.",
]

FINAL = [
    "The capital of France is Paris.",
    "42",
    "Done. I created report.md with the three findings.",
    "Here is the summary:\n\n- A\n- B\n- C",
    "I hope this helps! Let me know if you have any other questions.",
    "Let me know if you need anything else.",
    "Feel free to ask if anything is unclear.",
    "The tests pass: 12 passed, 0 failed.",
    "Would you like me to fix these as well?",
    "I'll be here if you need more help.",
    "I fixed the bug in parser.py; all tests pass now.",
    "The job failed because the disk was full. Next steps for you: free some space, rerun it.",
    "```python\nprint('hi')\n```\nThis prints hi.",
    "Sure! Here's the answer: 7.",
    "I will not do that, because it would delete your data.",
    "Let's hope the next build is green.",
    "If you want, I'll add tests for the edge cases.",
    "I can also write tests for this if you'd like.",
    "Let me summarize: the build failed twice, then passed.",
    "The three files are a.py, b.py and c.py.",
    "I need to know which environment you mean before I can answer.",
    "Should I run the migrations next?",
    "All done!",
    "No.",
    "The answer is 3 (see the table above).",
    "I'll keep an eye on it.",
    "That's everything I found. I'll stop here.",
    "Status: the build is green.",
    "1. Install the package\n2. Run `agentrio demo`\n3. Read the output",
    "Let me be clear: this is unsafe.",
    "The job ran in 3.2 s and produced 14 files.",
    "Next time, run it with --verbose.",
    # plans, commitments and sign-offs that end a reply (a review's findings)
    "Let's go with option B.",
    "I'll add it to the list.",
    "I'll open a PR with these changes.",
    "Thanks, I'll update the README next time.",
    "OK, I'll try harder next time.",
    "Let's review the results together.",
    "I'll use the default settings, which are fine for this case.",
    "The answer is 7...",
    "Options include A, B, C, etc...",
    "Regards,",
    "Best,",
    "Thanks,",
    "Cheers,",
    "Thanks for the report.\n\nBest regards,",
    "Let's continue tomorrow.",
    "I'll check the logs later.",
    "I'll look into it soon.",
    # remarks to the reader that end a reply (issue #21)
    "I need to stop here because the file is missing.",
    "I need to point out that this deletes your data.",
    "I need to note that these figures are estimates.",
    "I need to mention that the API is deprecated.",
    "I need to add that the tests are flaky.",
    "I need to warn you that this cannot be undone.",
    "I need to be honest about the limits of this analysis.",
    "I need to emphasize that the key must stay secret.",
    "Let me point out that the build is still red.",
    "Let me note that the numbers are rounded.",
    "Let me stop here.",
    "Let me add that the fix is untested.",
    "I need to check with you before deleting anything.",
    "I need to confirm this with you before I run the migration.",
    # the same with a word between (review of #21), and more remarks
    "Let me also note the license change.",
    "Let me just say this works now.",
    "Let me briefly mention that the cache is cold.",
    "Let me thank you for your patience.",
    "Let me recommend option B.",
    "Let me suggest pinning the version.",
]


@pytest.mark.parametrize("text", UNFINISHED)
def test_intermediate_replies_look_unfinished(text: str) -> None:
    assert looks_unfinished(text) is True


@pytest.mark.parametrize("text", FINAL)
def test_final_answers_do_not(text: str) -> None:
    assert looks_unfinished(text) is False
