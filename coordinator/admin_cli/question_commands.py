"""`deskfleet questions ...`: what goals asked, and answering them."""

from __future__ import annotations

import argparse
from typing import Any

from coordinator.admin_cli import render
from coordinator.admin_cli.client import CoordinatorClient
from shared.gen.deskfleet.v1 import runs_pb2


def questions_list(client: CoordinatorClient, args: argparse.Namespace) -> None:
    reply = client.call(
        client.runs.ListQuestions,
        runs_pb2.ListQuestionsRequest(
            run_id=args.run_id, include_closed=args.all, limit=args.limit
        ),
    )
    doc = render.as_dict(reply)
    if args.json:
        render.print_json(doc)
    elif doc.get("questions"):
        print(render.question_rows(doc["questions"]))
    else:
        print("no open questions" if not args.all else "no questions")


def questions_answer(client: CoordinatorClient, args: argparse.Namespace) -> None:
    # Answering twice with the same text is the same answer: a send whose answer was lost is
    # safe to repeat.
    question = client.call_repeatable(
        client.runs.AnswerQuestion, runs_pb2.AnswerQuestionRequest(id=args.id, text=args.text)
    )
    doc = render.as_dict(question)
    if args.json:
        render.print_json(doc)
    elif question.guidance_id:
        print(
            f"question {question.id} had expired and its goal went on: the answer joins its"
            f" next model call (guidance {question.guidance_id})"
        )
    else:
        print(f"question {question.id} of run {question.run_id} answered")


def add_parsers(sub: Any, leaf: Any) -> None:
    questions = sub.add_parser("questions", help="questions goals asked").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    p = leaf(questions, "list", questions_list, "questions goals asked (open ones by default)")
    p.add_argument("--run", dest="run_id", default="", metavar="RUN_ID", help="one run's questions")
    p.add_argument("--all", action="store_true", help="answered and expired ones too")
    p.add_argument(
        "--limit", type=int, default=0, metavar="N", help="at most this many (default 100)"
    )
    p = leaf(questions, "answer", questions_answer, "answer a goal's question")
    p.add_argument("id", metavar="QUESTION_ID", help="the question's id (questions list)")
    p.add_argument("text", metavar="TEXT", help="the answer")
